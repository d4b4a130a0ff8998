"""`polyrl tasks …` end to end through polyrl.cli.run: output, files, and one-line errors with exit code 2."""

import json

import pytest

from polyrl.cli import run
from polyrl.tasks import get_task
from polyrl.tasks.io import export_problems, load_problems, problem_row, write_rows


def _ok(capsys, argv):
    code = run(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _user_error(capsys, argv):
    code = run(argv)
    _out, err = capsys.readouterr()
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_list_shows_builtins_and_filters_by_category(capsys):
    assert "addition" in _ok(capsys, ["tasks", "list"])
    out = _ok(capsys, ["tasks", "list", "--category", "sequential"])
    assert "sort_digits" in out and "addition" not in out


def test_list_rg_includes_reasoning_gym(capsys):
    pytest.importorskip("reasoning_gym")
    assert "rg/basic_arithmetic" in _ok(capsys, ["tasks", "list", "--rg"])


def test_show_prints_difficulty_table_and_two_examples(capsys):
    out = _ok(capsys, ["tasks", "show", "addition"])
    assert "digits" in out and "easy" in out and "hard" in out
    assert out.count("example: seed") == 2 and out.count("reference: <answer>") == 2


def test_sample_json_is_deterministic_and_honours_split(capsys):
    argv = ["tasks", "sample", "addition", "--n", "3", "--seed", "4", "--json", "--difficulty", "hard"]
    first = [json.loads(line) for line in _ok(capsys, argv).splitlines()]
    assert [r["seed"] for r in first] == [4, 5, 6] and {r["difficulty"] for r in first} == {1.0}
    assert [json.loads(line) for line in _ok(capsys, argv).splitlines()] == first
    evals = [json.loads(line) for line in _ok(capsys, [*argv, "--split", "eval"]).splitlines()]
    assert {r["split"] for r in evals} == {"eval"} and evals[0]["question"] != first[0]["question"]


def test_sample_accepts_explicit_parameters(capsys):
    out = _ok(capsys, ["tasks", "sample", "addition", "--n", "1", "--json", "--difficulty", '{"digits": 3}'])
    assert json.loads(out)["params"]["digits"] == 3


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["tasks", "show", "additon"], "did you mean addition"),
        (["tasks", "sample", "addition", "--difficulty", "extreme"], "unknown difficulty"),
        (["tasks", "sample", "addition", "--difficulty", "1.5"], "outside [0, 1]"),
        (["tasks", "sample", "addition", "--split", "test"], "unknown split"),
        (["tasks", "list", "--category", "nope"], "unknown category"),
        (["tasks", "export", "--tasks", "addition", "--n", "2", "--out", "x.csv"], "use .jsonl or .parquet"),
        (["tasks", "score", "missing.jsonl"], "no such file"),
        (["tasks", "show", "rg/basic_arithmetc"], "rg/basic_arithmetic"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(capsys, argv, needle):
    assert needle in _user_error(capsys, argv)


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_export_round_trips_through_datasets_and_loader(capsys, tmp_path, suffix):
    datasets = pytest.importorskip("datasets")
    out = tmp_path / f"set.{suffix}"
    _ok(
        capsys,
        [
            "tasks",
            "export",
            "--tasks",
            "addition,sort_digits",
            "--n",
            "4",
            "--split",
            "eval",
            "--difficulty",
            "0.3",
            "--seed-start",
            "10",
            "--out",
            str(out),
        ],
    )
    expected = [get_task(t).generate(s, "0.3", "eval") for t in ("addition", "sort_digits") for s in range(10, 14)]
    assert load_problems(out) == expected
    hf = datasets.load_dataset(
        "json" if suffix == "jsonl" else "parquet",
        data_files=str(out),
        split="train",
        cache_dir=str(tmp_path / "cache"),
    )
    assert hf.num_rows == 8 and hf[0]["id"] == expected[0].id
    assert json.loads(hf[4]["answer"]) == expected[4].answer
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _score_file(tmp_path, suffix="jsonl"):
    task = get_task("addition")
    problems = [task.generate(s) for s in range(4)]
    responses = [task.reference_response(p) for p in problems[:2]] + ["<answer>-1</answer>", "no tags"]
    path = tmp_path / f"responses.{suffix}"
    write_rows(path, [problem_row(p, r) for p, r in zip(problems, responses)])
    return path


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_score_reports_accuracy_and_writes_verdicts(capsys, tmp_path, suffix):
    verdicts = tmp_path / "verdicts.jsonl"
    out = _ok(capsys, ["tasks", "score", str(_score_file(tmp_path, suffix)), "--out", str(verdicts)])
    assert "addition" in out and "0.500" in out and "0.750" in out  # 2/4 right, 3/4 well formatted
    rows = [json.loads(line) for line in verdicts.read_text().splitlines()]
    assert [r["reason"] for r in rows] == ["correct", "correct", "wrong", "no_answer"]


def test_score_rejects_malformed_file_with_line_number(capsys, tmp_path):
    path = _score_file(tmp_path)
    path.write_text(path.read_text() + "{not json\n")
    assert f"{path}:5: not valid JSON" in _user_error(capsys, ["tasks", "score", str(path)])


def test_score_needs_a_response_column(capsys, tmp_path):
    path = tmp_path / "problems.jsonl"
    export_problems(path, [get_task("addition").generate(0)])
    assert "needs a string 'response' column" in _user_error(capsys, ["tasks", "score", str(path)])


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_score_refuses_a_file_without_rows(capsys, tmp_path, content):
    path = tmp_path / "responses.jsonl"
    path.write_text(content)
    assert (
        _user_error(capsys, ["tasks", "score", str(path)])
        == f"polyrl: error: {path}: no rows to score (the file has no rows)"
    )


def test_score_refuses_a_parquet_file_without_rows(capsys, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "responses.parquet"
    pq.write_table(pa.table({"id": pa.array([], pa.string()), "response": pa.array([], pa.string())}), path)
    assert "no rows to score" in _user_error(capsys, ["tasks", "score", str(path)])


def test_check_leakage_finds_planted_overlap(capsys, tmp_path):
    task = get_task("sort_digits")
    a, b, clean = tmp_path / "a.jsonl", tmp_path / "b.parquet", tmp_path / "clean.jsonl"
    export_problems(a, [task.generate(s) for s in range(10)])
    export_problems(b, [task.generate(s) for s in range(7, 12)])  # seeds 7, 8, 9 planted
    export_problems(clean, [task.generate(s, split="eval") for s in range(10)])
    out = _ok(capsys, ["tasks", "check-leakage", str(a), str(b)])
    assert "LEAKAGE: 3 distinct prompts" in out and "sort_digits/train/7/" in out
    assert run(["tasks", "check-leakage", str(a), str(b), "--fail"]) == 1
    capsys.readouterr()
    assert "no leakage" in _ok(capsys, ["tasks", "check-leakage", str(a), str(clean), "--fail"])


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "set.jsonl"
    export_problems(path, [get_task("addition").generate(0)])
    before = path.read_bytes()
    with pytest.raises(TypeError):
        write_rows(path, [{"task": "addition"}, {"task": object()}])  # the second row cannot be written
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["set.jsonl"]


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_round_trip_is_exact_for_any_knob(tmp_path, suffix):
    problems = [get_task("sort_digits").generate(s, 1 / 3, "eval") for s in range(3)]
    export_problems(tmp_path / f"p.{suffix}", problems)
    assert load_problems(tmp_path / f"p.{suffix}") == problems


def test_corrupt_parquet_is_a_user_error(capsys, tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1 not really")
    assert "not a readable parquet file" in _user_error(capsys, ["tasks", "check-leakage", str(path), str(path)])


def test_an_option_outside_its_range_is_a_one_line_error(capsys):
    from polyrl.cli import run

    assert run(["tasks", "sample", "addition", "--n", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err) and any("greater than or equal to 1" in line for line in err)
