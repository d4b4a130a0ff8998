"""What one RL step logs (train/metrics.py), checked on hand-made groups with hand-computed numbers: every
rollout statistic is over every group the step generated, kept or dropped by dynamic sampling, with the kept
share beside it; token counts are named for what they are."""

import json
from pathlib import Path

import pytest

from polyrl.curriculum.samplers import UniformSampler
from polyrl.rollout import Trajectory
from polyrl.rollout.collect import collect_groups
from polyrl.tasks import Verdict, get_task
from polyrl.train.metrics import step_metrics
from polyrl.train.trainer import Trainer

TASKS = ["addition", "grid_walk"]


def _completion(reward: float, failed: bool = False) -> Trajectory:
    problem = get_task("addition").generate(0, "easy")
    verdict = Verdict(reward, reward > 0, "correct" if reward > 0 else "wrong", True, "1")
    t = Trajectory("addition", 0, problem, [1], [2, 3, 4], "text", True, reward, {"mine": 0.0}, verdict)
    if failed:
        t.reward_failures = {"mine": "error: TypeError: boom"}
    return t


def _episode(reason: str, policy_tokens: int, env_tokens: int) -> Trajectory:
    """A finished episode of ``grid_walk``: ``policy_tokens`` of the policy's, then ``env_tokens`` of the env's."""
    problem = get_task("addition").generate(1, "easy")
    mask = [1] * policy_tokens + [0] * env_tokens
    info = {"turns": 1, "tool_calls": 2, "tool_errors": 1, "policy_tokens": policy_tokens, "env_tokens": env_tokens}
    return Trajectory(
        "grid_walk",
        0,
        problem,
        [1],
        [5] * len(mask),
        "episode",
        True,
        0.0,
        {},
        Verdict(0.0, False, reason),
        policy_mask=mask,
        turn_spans=[(0, policy_tokens)],
        turn_rewards=[0.0],
        info=info,
    )


class _Source:
    """Hands out the given groups once, as a rollout source would."""

    def __init__(self, groups):
        self.left = groups

    def groups(self, n, make_problems):
        out, self.left = self.left[:n], self.left[n:]
        return out

    def stats(self):
        return {}


def _metrics(groups, dynamic_sampling=True):
    collected = collect_groups(
        _Source(groups), len(groups), None, lambda trajs: None, lambda g: None, dynamic_sampling, max_refills=0
    )
    return step_metrics(collected, None, None, 1.0, lr=0.0, curriculum=(UniformSampler(TASKS), None))


def _mixed_step():
    """One group with signal (kept), one whose reward term failed everywhere and one whose episodes all timed out
    (both with equal rewards: dropped)."""
    return [
        [_completion(1.0), _completion(0.0)],
        [_completion(0.0, failed=True), _completion(0.0, failed=True)],
        [_episode("timeout", 3, 2), _episode("timeout", 5, 0)],
    ]


def test_reward_failures_of_dropped_groups_are_counted():
    m = _metrics(_mixed_step())
    assert m["groups_dropped"] == 2
    assert m["reward_failures/mine"] == 2.0 and m["reward_failures/mine/addition"] == 2.0
    assert m["reward_terms/mine"] == 0.0


def test_end_reasons_of_dropped_episodes_are_logged():
    m = _metrics(_mixed_step())
    assert m["end/timeout/grid_walk"] == 1.0 and m["success/grid_walk"] == 0.0


def test_rollout_statistics_are_over_every_generated_group_with_the_kept_share_beside_them():
    m = _metrics(_mixed_step())
    assert m["reward"] == pytest.approx(1 / 6) and m["accuracy"] == pytest.approx(1 / 6)
    assert m["reward/addition"] == pytest.approx(1 / 4) and m["reward/grid_walk"] == 0.0
    assert m["zero_variance_frac"] == pytest.approx(2 / 3) and m["zero_variance_frac/addition"] == 0.5
    assert m["groups_kept_frac"] == pytest.approx(1 / 3)
    assert m["groups_kept_frac/addition"] == 0.5 and m["groups_kept_frac/grid_walk"] == 0.0
    assert m["tokens"] == 4 * 3 + 5 + 5


def test_a_step_whose_every_group_is_dropped_still_logs_what_happened():
    m = _metrics(_mixed_step()[1:])
    assert m["groups_kept_frac"] == 0.0 and m["reward_failures/mine"] == 2.0 and m["end/timeout/grid_walk"] == 1.0
    assert m["reward"] == 0.0 and "entropy" not in m and "loss" not in m  # nothing was trained on


def test_without_dynamic_sampling_every_group_is_kept():
    m = _metrics(_mixed_step(), dynamic_sampling=False)
    assert m["groups_kept_frac"] == 1.0 and m["groups_dropped"] == 0 and m["reward_failures/mine"] == 2.0


def test_policy_tokens_per_task_are_sums_like_the_step_total_and_per_episode_means_say_so():
    m = _metrics(_mixed_step(), dynamic_sampling=False)
    assert m["policy_tokens/grid_walk"] == 3 + 5 and m["policy_tokens/addition"] == 4 * 3
    assert m["policy_tokens"] == m["policy_tokens/addition"] + m["policy_tokens/grid_walk"]
    assert m["policy_tokens_per_episode/grid_walk"] == 4.0 and m["env_tokens_per_episode/grid_walk"] == 1.0
    assert m["tool_calls/grid_walk"] == 2.0 and m["tool_errors/grid_walk"] == 1.0  # means per episode


BROKEN = """
def returns_none(completions, **kwargs):
    return None  # a TRL-style function that forgot its return: every call fails (not_a_list)

def raises(response):
    raise RuntimeError("the user's bug")
"""


@pytest.fixture
def broken_run(tiny_train_config, tmp_path, monkeypatch):
    """A run with dynamic sampling whose only paid term is a reward function that fails on every call: every
    reward is 0, so every group is dropped."""
    (tmp_path / "broken_rewards.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))

    def run(fn: str):
        terms = [{"fn": f"broken_rewards:{fn}", "weight": 1.0}]
        cfg = tiny_train_config(
            sft__enabled=False,
            rl__steps=2,
            rl__dynamic_sampling=True,
            rl__max_refills=1,
            reward={"verifier": 0.0, "format": 0.0, "terms": terms},
            eval__problems_per_task=2,
            threads=1,
            tensorboard=False,
        )
        Trainer(cfg).run()
        records = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
        return [r for r in records if r["stage"] == "rl"]

    return run


def test_a_trained_step_whose_every_group_was_dropped_logs_its_reward_failures(broken_run):
    rl = broken_run("returns_none")
    generated = 2 * 4 * 4  # two rounds (max_refills 1) of 4 prompts × 4 completions
    for r in rl:
        assert r["groups_dropped"] == 8 and r["groups_kept_frac"] == 0.0
        assert r["reward_failures/returns_none"] == generated
        assert r["reward_failures/returns_none/addition"] + r["reward_failures/returns_none/sort_digits"] == generated
        assert r["reward_terms/returns_none"] == 0.0


def test_a_term_that_failed_on_every_call_says_so_in_one_warning_line(broken_run, capsys):
    broken_run("raises")
    lines = [line for line in capsys.readouterr().err.splitlines() if "failed on every call" in line]
    assert len(lines) == 1 and "'raises'" in lines[0] and "RuntimeError: the user's bug" in lines[0]
