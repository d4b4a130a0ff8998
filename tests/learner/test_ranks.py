"""One process is the learner's Ranks too: its share is every row and every collective hands its input back, so
the update and the SFT step are one code path for one process and for the ranks of a sharded run."""

import torch

from polyrl.learner.ranks import ONE_PROCESS


def test_one_process_trains_every_row_in_as_many_passes_as_it_has():
    rows = torch.tensor([4, 1, 3])
    assert ONE_PROCESS.mine(rows) is rows
    pieces = [torch.tensor([4]), torch.tensor([1, 3])]
    assert ONE_PROCESS.lockstep(iter(pieces)) == pieces  # no idle pass: no other rank to keep in step with


def test_one_process_collectives_hand_their_input_back():
    values = torch.tensor([0.5, float("nan")])
    assert ONE_PROCESS.sum(2.5) == 2.5
    assert ONE_PROCESS.sum_rows(values) is values and ONE_PROCESS.merge_rows(values) is values
    assert ONE_PROCESS.gather({"a": 1}) == [{"a": 1}] and ONE_PROCESS.broadcast("run") == "run"


def test_one_process_writes_the_run_and_its_model_is_not_sharded():
    assert ONE_PROCESS.is_writer and not ONE_PROCESS.sharded
    assert (ONE_PROCESS.rank, ONE_PROCESS.world) == (0, 1)
