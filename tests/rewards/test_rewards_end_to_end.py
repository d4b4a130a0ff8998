"""Reward models, LLM judges and label-free rewards from the command line into a training run."""

import json
from pathlib import Path

import pytest

from polyrl.cli import run
from polyrl.train.trainer import Trainer


def test_rm_cli_then_training_with_model_and_majority_terms(tmp_path, capsys, tiny_train_config):
    pairs = tmp_path / "prefs.jsonl"
    assert run(["rm", "build-data", "--tasks", "addition,sort_digits", "--n", "16", "--out", str(pairs)]) == 0
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    assert len(rows) == 32 and {"prompt", "chosen", "rejected"} <= set(rows[0])
    rm_dir = tmp_path / "rm"
    assert run(["rm", "train", "--data", str(pairs), "--out", str(rm_dir), "--steps", "4", "--batch-size", "8"]) == 0
    assert "pairwise accuracy" in capsys.readouterr().out.lower()

    cfg = tiny_train_config(
        rl__steps=2,
        sft__steps=2,
        reward={
            "verifier": 1.0,
            "reward_model": 0.5,
            "majority_vote": 0.5,
            "reward_model_source": {"path": str(rm_dir)},
        },
    )
    Trainer(cfg).run()
    records = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["stage"] == "rl"][-1]
    assert 0.0 <= last["reward_terms/reward_model"] <= 1.0
    assert 0.0 <= last["reward_terms/majority_vote"] <= 1.0


def test_rm_train_rejects_preference_files_without_the_columns(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "chosen": "2"}\n')
    assert run(["rm", "train", "--data", str(bad), "--out", str(tmp_path / "rm")]) == 2
    err = capsys.readouterr().err.strip()
    assert "rejected" in err and len(err.splitlines()) == 1


RUBRIC = str(Path(__file__).parents[2] / "configs" / "rubrics" / "correct_and_concise.md")


def _judge_answer(prompt: str) -> str:
    """The fake endpoint: garbage for every sort_digits sample; otherwise Score: 8 (pointwise) or a judge that
    always prefers the first answer (pairwise)."""
    if "## Problem\nsort" in prompt:
        return "I would rather not say."
    return "[[A]]" if "## Response A" in prompt else "Correct and concise. Score: 8"


@pytest.mark.parametrize("mode", ["pointwise", "pairwise"])
def test_training_run_with_a_judge_term_at_an_endpoint(mode, tiny_train_config, fake_openai):
    server = fake_openai(_judge_answer)
    cfg = tiny_train_config(
        threads=1,
        sft__steps=2,
        rl__steps=3,
        reward={
            "verifier": 1.0,
            "judge": 0.5,
            "judge_source": {
                "rubric": RUBRIC,
                "mode": mode,
                "backend": "openai",
                "model": "fake",
                "base_url": server.url,
                "timeout_s": 10,
                "retries": 0,
                "max_concurrency": 4,
            },
        },
    )
    Trainer(cfg).run()  # garbage verdicts are counted zero rewards, not a crash
    assert (Path(cfg.run_dir) / "final_model").is_dir()
    assert server.calls > 0 and all("Rubric: correct and concise" in p for p in server.prompts)
    samples = cfg.rl.steps * cfg.rl.prompts_per_step * cfg.rl.group_size
    assert server.calls <= samples * (2 if mode == "pairwise" else 1)  # one call per sample, two when swapped
    records = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["stage"] == "rl"]
    assert [r["step"] for r in steps] == [1, 2, 3]
    judged = 7 / 9 if mode == "pointwise" else 0.5  # Score: 8 on 1-10; [[A]] in both orders averages to a tie
    seen = set()
    for r in steps:
        assert "reward_terms/judge" in r
        assert r["reward"] == pytest.approx(r["reward_terms/verifier"] + 0.5 * r["reward_terms/judge"])
        for task in ("addition", "sort_digits"):
            if f"reward/{task}" not in r:
                continue  # not sampled this step
            seen.add(task)
            terms = r[f"reward_terms/verifier/{task}"] + 0.5 * r[f"reward_terms/judge/{task}"]
            assert r[f"reward/{task}"] == pytest.approx(terms)
        if "reward/addition" in r:
            assert r["reward_terms/judge/addition"] == pytest.approx(judged)
            assert "reward_failures/judge/addition" not in r
            # pairwise: the always-[[A]] judge contradicts itself on every swapped pair
            assert ("judge_position_inconsistent/addition" in r) == (mode == "pairwise")
        if "reward/sort_digits" in r:
            assert r["reward_terms/judge/sort_digits"] == 0.0
            assert r["reward_failures/judge/sort_digits"] > 0
            assert r["reward_failures/judge"] == r["reward_failures/judge/sort_digits"]
            assert "judge_position_inconsistent/sort_digits" not in r
        if mode == "pairwise":  # every sample either failed (sort_digits) or was judged inconsistently (addition)
            counted = r.get("reward_failures/judge", 0) + r.get("judge_position_inconsistent", 0)
            assert counted == cfg.rl.prompts_per_step * cfg.rl.group_size
    assert seen == {"addition", "sort_digits"}
