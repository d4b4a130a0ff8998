"""`polyrl eval --model`: result files, resuming an interrupted evaluation, compare."""

import json

from polyrl.cli import run

ARGS = ["--tasks", "addition,caesar", "--difficulty", "easy", "--n", "3", "--samples", "2", "--max-new-tokens", "6"]


def _eval(checkpoint, out, *extra):
    return run(["eval", "--model", str(checkpoint), *ARGS, "--out", str(out), *extra])


def test_eval_checkpoint_writes_results_json_markdown_and_samples(tiny_checkpoint, tmp_path, capsys):
    assert _eval(tiny_checkpoint, tmp_path / "ev") == 0
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert set(results["tasks"]) == {"addition", "caesar"}
    assert set(results["categories"]) == {"arithmetic", "crypto"}
    assert results["problems_done"] == results["problems_total"] == 6
    assert {"accuracy", "pass@1", "pass@2", "maj@2", "mean_length", "format_failure_rate"} <= set(results["overall"])
    samples = (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 6 * 3  # greedy + 2 samples per problem
    assert "| addition |" in (tmp_path / "ev" / "results.md").read_text()
    assert "| **overall** (mean over tasks) |" in capsys.readouterr().out


def test_untrained_model_garbage_is_scored_zero_with_a_reason(tiny_checkpoint, tmp_path):
    assert _eval(tiny_checkpoint, tmp_path / "ev") == 0
    records = [json.loads(line) for line in (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()]
    wrong = [r for r in records if not r["correct"]]
    assert wrong and all(
        r["score"] == 0.0
        and r["reason"] in {"no_answer", "unclosed_tag", "empty_answer", "wrong", "malformed", "multiple_answers"}
        for r in wrong
    )


def test_resume_finishes_an_interrupted_evaluation_with_the_same_results(tiny_checkpoint, tmp_path):
    assert _eval(tiny_checkpoint, tmp_path / "full") == 0
    full = json.loads((tmp_path / "full" / "results.json").read_text())
    # simulate a kill: half the samples, a half-written last line, no results.json yet
    out = tmp_path / "cut"
    assert _eval(tiny_checkpoint, out) == 0
    lines = (out / "samples.jsonl").read_text().splitlines()
    (out / "samples.jsonl").write_text("\n".join(lines[:7]) + "\n" + lines[7][:25])
    (out / "results.json").unlink()
    assert _eval(tiny_checkpoint, out, "--resume") == 0
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted((r["problem_key"], r["sample"]) for r in records) == sorted(
        (json.loads(line)["problem_key"], json.loads(line)["sample"]) for line in lines
    )
    resumed = json.loads((out / "results.json").read_text())
    assert resumed["tasks"]["addition"]["accuracy"] == full["tasks"]["addition"]["accuracy"]  # greedy is deterministic
    assert resumed["problems_done"] == 6


def test_existing_output_without_resume_is_refused(tiny_checkpoint, tmp_path, capsys):
    assert _eval(tiny_checkpoint, tmp_path / "ev") == 0
    assert _eval(tiny_checkpoint, tmp_path / "ev") == 2
    assert "pass --resume" in capsys.readouterr().err


def test_resume_with_another_suite_is_refused(tiny_checkpoint, tmp_path, capsys):
    assert _eval(tiny_checkpoint, tmp_path / "ev") == 0
    code = run(
        [
            "eval",
            "--model",
            str(tiny_checkpoint),
            "--tasks",
            "addition",
            "--n",
            "2",
            "--out",
            str(tmp_path / "ev"),
            "--resume",
        ]
    )
    assert code == 2 and "another suite or model" in capsys.readouterr().err


def test_model_and_endpoint_are_exclusive(tmp_path, capsys):
    assert run(["eval", "--tasks", "addition", "--out", str(tmp_path / "ev")]) == 2
    assert "exactly one of --model PATH or --endpoint URL" in capsys.readouterr().err


def test_missing_checkpoint_is_a_one_line_error(tmp_path, capsys):
    assert run(["eval", "--model", str(tmp_path / "nope"), "--tasks", "addition", "--out", str(tmp_path / "ev")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_compare_prints_side_by_side_differences(tmp_path, capsys):
    for name, acc in (("base", 0.2), ("tuned", 0.6)):
        (tmp_path / name).mkdir()
        row = {"problems": 5, "accuracy": acc}
        (tmp_path / name / "results.json").write_text(json.dumps({"tasks": {"addition": row}, "overall": row}))
    assert run(["eval", "compare", str(tmp_path / "base" / "results.json"), str(tmp_path / "tuned")]) == 0
    out = capsys.readouterr().out
    assert "| task | base | tuned | Δ |" in out and "| addition | 20.0% | 60.0% | +40.0 |" in out


def test_compare_rejects_a_file_that_is_not_results(tmp_path, capsys):
    (tmp_path / "x.json").write_text("[]")
    assert run(["eval", "compare", str(tmp_path / "x.json"), str(tmp_path / "x.json")]) == 2
    assert "not a `polyrl eval` results file" in capsys.readouterr().err
