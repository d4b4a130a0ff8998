"""Length-bucketed micro-batches: groups of similar length share a micro-batch, so padding costs less, and the
update's gradient is the one of the whole padded batch."""

from __future__ import annotations

import copy

import pytest
import torch

from polyrl.device import HOST
from polyrl.forward.batch import length_ordered, pack_rows, padding_share
from polyrl.learner.settings import UpdateSettings
from polyrl.learner.update import micro_batches, policy_update
from polyrl.learner.update_batch import prepare_update
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.rollout import Trajectory
from polyrl.tasks import Problem, Verdict
from polyrl.train.config import RLConfig


def test_groups_stay_together_ordered_by_their_longest_row():
    rows = torch.tensor([0, 1, 2, 3, 4, 5])
    lengths = torch.tensor([9, 3, 4, 4, 2, 8])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])  # longest rows: 9, 4, 8
    assert length_ordered(rows, lengths, groups).tolist() == [2, 3, 4, 5, 0, 1]


def test_length_order_pads_less_than_group_order():
    lengths = torch.tensor([20, 20, 4, 4, 12, 12, 4, 4])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    rows = torch.arange(8)
    by_group = pack_rows(rows, lengths, budget=40)
    by_length = pack_rows(length_ordered(rows, lengths, groups), lengths, budget=40)
    # group order mixes 4- and 12-token rows: [0,1] [2,3,4] [5,6,7], 112 tokens computed for 80 real ones
    assert [p.tolist() for p in by_group] == [[0, 1], [2, 3, 4], [5, 6, 7]]
    assert padding_share(by_group, lengths) == pytest.approx(1 - 80 / 112)
    # length order: the four short rows, the 12-token pair, the 20-token pair; no padding, as many pieces
    assert [p.tolist() for p in by_length] == [[2, 3, 6, 7], [4, 5], [0, 1]]
    assert padding_share(by_length, lengths) == 0.0


def _trajs() -> list[Trajectory]:
    """Six groups of three: prompts of 3–8 tokens, responses of 1–12 (very uneven lengths), mixed rewards."""
    g = torch.Generator().manual_seed(1)
    problem = Problem("a", "q", "q", None, None, 0, "train", 0.0, {})
    out = []
    for group in range(6):
        prompt = torch.randint(3, 40, (3 + group,), generator=g).tolist()
        for k in range(3):
            response = torch.randint(3, 40, (1 + (5 * group + 4 * k) % 12,), generator=g).tolist()
            reward = float((k + group) % 2)
            verdict = Verdict(reward, reward >= 1, "")
            out.append(Trajectory("a", group, problem, prompt, response, "", True, reward, {}, verdict))
    return out


@pytest.mark.parametrize("share_prompts", [True, False])
def test_the_length_bucketed_update_has_the_padded_batch_gradient(share_prompts):
    tiny = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}
    policy = load_policy(ModelConfig(path="tiny", tiny=tiny), seed=0, device=HOST)
    grads = {}
    for budget in (None, 48):
        cfg = UpdateSettings.from_config(
            RLConfig(micro_batch_tokens=budget, max_new_tokens=12, share_prompts=share_prompts)
        )
        batch = prepare_update(_trajs(), ["a"], policy.tokenizer.pad_token_id, cfg)
        if budget:
            lengths = batch.tokens.attention_mask.sum(1)
            pieces = list(micro_batches(batch.active, lengths, batch.group_ids, budget))
            assert len(pieces) > 2, "the update really runs in several micro-batches"
        model = copy.deepcopy(policy.model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # keep the gradients, leave the weights
        policy_update(model, optimizer, batch, cfg, list(model.parameters()), device=HOST)
        grads[budget] = [p.grad.clone() for p in model.parameters()]
    for whole, split in zip(grads[None], grads[48]):
        assert torch.allclose(whole, split, atol=1e-6)
