"""What a run shows while it trains: the plain progress line (output not a terminal), every tenth of the stage with
unmeasured values as a dash; and the logged samples, with the prompt the policy was shown."""

from polyrl.train.progress import StageProgress


def test_plain_lines_show_an_unmeasured_value_as_a_dash(capsys):
    progress = StageProgress(enabled=True)
    progress.start("rl", total=10)
    progress.update(1, {"reward": 0.25, "accuracy": 0.5, "entropy": float("nan")})
    progress.update(2, {"reward": 0.125, "entropy": 1.2345})
    progress.stop()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "[rl] step 1/10  reward 0.25  accuracy 0.5  entropy —",
        "[rl] step 2/10  reward 0.125  entropy 1.23",
    ]


def test_logged_samples_show_the_prompt_the_policy_read(tiny_train_config):
    # a natural-style run logs the natural statement it trained on, not the problem's terse prompt
    import json
    from pathlib import Path

    from polyrl.train.trainer import Trainer

    cfg = tiny_train_config(prompt={"field": "prompt", "style": "natural"}, sft__steps=2, rl__steps=1)
    Trainer(cfg).run()
    records = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    logged = {s["task"]: s["prompt"] for r in records if r.get("stage") == "rl" for s in r.get("samples", [])}
    assert logged.keys() == {"addition", "sort_digits"}
    assert logged["addition"].startswith("Compute the sum ") and "=" not in logged["addition"].split("\n")[0]
    assert logged["addition"].endswith("Give your final answer inside <answer></answer> tags.")
