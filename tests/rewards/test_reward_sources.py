"""Reward composition, majority vote, reward models and preference data: specifications with hand-computed numbers."""

import json

import pytest
import torch

from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.rewards import RewardConfig, RewardScorer, compute_rewards, majority_vote_scores, score
from polyrl.rewards.rm_training import build_preference_data, load_preferences, save_preferences, train_reward_model
from polyrl.rollout import Trajectory
from polyrl.tasks import get_task

SMALL = {"hidden_size": 16, "intermediate_size": 32, "num_layers": 1, "num_heads": 2}


def test_majority_vote_pays_agreement_with_the_group_majority():
    got = majority_vote_scores(["4", "5", "4", None, "4"])
    assert got == [(1.0, None), (0.0, None), (1.0, None), (0.0, "no_answer"), (1.0, None)]


def test_majority_vote_tie_goes_to_the_answer_seen_first():
    assert [v for v, _ in majority_vote_scores(["7", "8", "8", "7"])] == [1.0, 0.0, 0.0, 1.0]


def test_per_task_weights_override_the_global_ones():
    task = get_task("addition")
    problem = task.generate(0, "easy")
    cfg = RewardConfig(verifier=1.0, format=0.5, tasks={"addition": {"verifier": 2.0}})
    r = compute_rewards(cfg, task, problem, task.reference_response(problem), 3, True, 16)
    assert r.terms == {"verifier": 1.0, "format": 1.0}
    assert r.total == pytest.approx(2.0 * 1.0 + 0.5 * 1.0)


def test_unknown_term_in_task_overrides_is_a_config_error():
    with pytest.raises(ValueError, match="unknown reward term"):
        RewardConfig(tasks={"addition": {"vibes": 1.0}})


def _traj(task, group, text, correct):
    problem = get_task(task).generate(group, "easy")
    verdict = get_task(task).verify(problem, text)
    assert verdict.correct == correct
    return Trajectory(task, group, problem, [1], [2], text, True, verdict.score, {"verifier": verdict.score}, verdict)


def test_scorer_adds_majority_vote_with_a_verifier_gate():
    problem = get_task("addition").generate(0, "easy")
    right = f"<answer>{problem.solution}</answer>"
    wrong = "<answer>-1</answer>"
    trajs = [_traj("addition", 0, t, c) for t, c in [(wrong, False), (wrong, False), (right, True)]]
    config = RewardConfig(majority_vote=0.5, gate="verifier")
    score(trajs, {"addition": get_task("addition")}, config, 16, RewardScorer(config, ["addition"], device=HOST))
    assert [t.reward_terms["majority_vote"] for t in trajs] == [1.0, 1.0, 0.0]
    # the wrong majority gets no bonus behind the gate; the right minority gets none either (it disagrees)
    assert [t.reward for t in trajs] == [0.0, 0.0, 1.0]


def test_scorer_rejects_model_terms_without_a_source_and_unknown_tasks():
    with pytest.raises(UserError, match="reward_model_source"):
        RewardScorer(RewardConfig(reward_model=1.0), ["addition"], device=HOST)
    with pytest.raises(UserError, match="not in the mix"):
        RewardScorer(RewardConfig(tasks={"sort_digits": {"verifier": 1.0}}), ["addition"], device=HOST)


def test_built_preference_pairs_are_verified_correct_vs_rejected():
    rows = build_preference_data(["addition", "sort_digits"], 5, seed=1)
    assert len(rows) == 10
    for row in rows:
        assert row["chosen"] != row["rejected"]


def test_preference_file_without_rejected_column_is_a_user_error(tmp_path):
    path = tmp_path / "prefs.jsonl"
    path.write_text("\n".join(json.dumps({"prompt": "p", "chosen": "a"}) for _ in range(3)))
    with pytest.raises(UserError, match="lacks column"):
        load_preferences(path)
    with pytest.raises(UserError, match="does not exist"):
        load_preferences(tmp_path / "missing.jsonl")


def test_trained_tiny_reward_model_is_a_reward_source(tmp_path):
    from polyrl.rewards import RewardModelConfig, RewardModelSource

    data = save_preferences(build_preference_data(["addition"], 40, seed=0), tmp_path / "prefs.jsonl")
    torch.set_num_threads(1)
    result = train_reward_model(
        data, "tiny", tmp_path / "rm", steps=30, batch_size=8, lr=3e-3, log=lambda m: None, tiny_shape=SMALL
    )
    assert 0.0 <= result["heldout_accuracy"] <= 1.0 and result["heldout_pairs"] == 4
    source = RewardModelSource(RewardModelConfig(path=str(tmp_path / "rm"), batch_size=2), device=HOST)
    scores = source.score(["1+1=", "2+2=", "3+3="], ["<answer>2</answer>", "<answer>4</answer>", "x"])
    assert len(scores) == 3 and all(0.0 < v < 1.0 and reason is None for v, reason in scores)


def test_causal_lm_directory_is_rejected_as_a_reward_model(tmp_path):
    from polyrl.policy.tiny import build_tiny_policy
    from polyrl.rewards.reward_model import load_reward_model

    model, _tok = build_tiny_policy()
    model.save_pretrained(tmp_path)
    with pytest.raises(UserError, match="num_labels=1"):
        load_reward_model(tmp_path, device=HOST)


def test_binary_preference_columns_are_read_as_utf8_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pairs = {
        c: pa.array([f"{c} {i}".encode() for i in range(4)], pa.binary()) for c in ("prompt", "chosen", "rejected")
    }
    pq.write_table(pa.table(pairs), tmp_path / "p.parquet")
    assert load_preferences(tmp_path / "p.parquet")[0] == {
        "prompt": "prompt 0",
        "chosen": "chosen 0",
        "rejected": "rejected 0",
    }
    pairs["chosen"] = pa.array([b"ok", b"ok", b"\xff", b"ok"], pa.binary())
    pq.write_table(pa.table(pairs), tmp_path / "bad.parquet")
    with pytest.raises(UserError, match="column 'chosen' holds bytes that are not UTF-8 text"):
        load_preferences(tmp_path / "bad.parquet")


def test_a_preference_csv_with_an_unclosed_quote_is_refused_naming_the_line(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("prompt,chosen,rejected\n" + "".join(f'"q{i},a,b\n' for i in range(10)))
    with pytest.raises(UserError, match=r"p.csv line 2: a quote opened there is not closed"):
        load_preferences(path)
