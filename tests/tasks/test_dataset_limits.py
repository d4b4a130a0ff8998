"""What a dataset file holds never decides how much memory training takes, and a malformed file is one line
with exit code 2 (issue #25): rows over the config's length budget are dropped or cut at load, with a count."""

import json
import re
import subprocess
import sys
import textwrap

import pytest

from polyrl.cli import run
from polyrl.errors import UserError
from polyrl.tasks.dataset import DatasetSpec, dataset_task

# dataset tasks a test registers leave the process-wide task registry when it ends
pytestmark = pytest.mark.usefixtures("forget_new_tasks")


def _rows(n: int) -> list[dict]:
    return [{"question": f"What is {i} plus {i}?", "answer": str(2 * i)} for i in range(n)]


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_row_over_the_prompt_budget_is_dropped_and_counted(tmp_path, capsys):
    path = _write(tmp_path / "d.jsonl", _rows(40) + [{"question": "x" * 5000, "answer": "1"}])
    task = dataset_task("test_long", DatasetSpec(path=path, max_prompt_chars=100))
    rows = task.rows.splits["train"] + task.rows.splits["eval"]
    assert len(rows) == 40 and all(len(r.question) <= 100 for r in rows)
    assert "d.jsonl: 41 rows, 1 with a prompt over max_prompt_chars=100 (dropped)" in capsys.readouterr().err


def test_long_rows_truncate_cuts_the_prompt_to_the_budget(tmp_path, capsys):
    path = _write(tmp_path / "d.jsonl", _rows(40) + [{"question": "x" * 5000, "answer": "1"}])
    task = dataset_task("test_cut", DatasetSpec(path=path, max_prompt_chars=100, long_rows="truncate"))
    rows = task.rows.splits["train"] + task.rows.splits["eval"]
    assert len(rows) == 41
    assert [r.question for r in rows if r.index == 40] == ["x" * 100]
    assert "1 with a prompt over max_prompt_chars=100 (prompt truncated)" in capsys.readouterr().err


def test_a_row_whose_answer_is_over_the_budget_is_dropped(tmp_path, capsys):
    path = _write(tmp_path / "d.jsonl", _rows(40) + [{"question": "What?", "answer": "7" * 600}])
    task = dataset_task("test_long_answer", DatasetSpec(path=path, max_answer_chars=500))
    assert len(task.rows.splits["train"]) + len(task.rows.splits["eval"]) == 40
    assert "1 with an answer over max_answer_chars=500 (dropped)" in capsys.readouterr().err


def test_a_file_with_no_row_within_the_budget_is_a_user_error(tmp_path):
    path = _write(tmp_path / "d.jsonl", [{"question": "x" * 50, "answer": "1"}] * 3)
    with pytest.raises(UserError, match="none of its 3 rows is within max_prompt_chars=10"):
        dataset_task("test_none", DatasetSpec(path=path, max_prompt_chars=10))


MEASURE = textwrap.dedent(
    """
    import sys
    from polyrl.train.config import load_config
    from polyrl.train.trainer import Trainer
    cfg = load_config(sys.argv[1])
    Trainer(cfg).run()
    # this process's own peak (VmHWM): getrusage's ru_maxrss keeps the forking parent's peak across exec
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    print(int(status["VmHWM"].split()[0]) // 1024)
    """
)


def test_a_20_mb_row_does_not_drive_training_memory(tmp_path, tiny_train_config):
    """The issue's 20 MB row (the kernel killed the trainer at 24 GB): dropped at load, the run stays small."""
    path = tmp_path / "big.jsonl"
    _write(path, _rows(60))
    with open(path, "a") as f:
        f.write(json.dumps({"question": "x" * 20_000_000, "answer": "1"}) + "\n")
    entry = {"name": "big", "dataset": str(path), "max_prompt_chars": 200, "eval_fraction": 0.2}
    cfg = tiny_train_config(tasks=[entry], sft__steps=4, rl__steps=2, tensorboard=False, threads=1)
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(json.dumps(cfg.model_dump(mode="json")))
    done = subprocess.run([sys.executable, "-c", MEASURE, str(cfg_file)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 with a prompt over max_prompt_chars=200 (dropped)" in done.stderr
    peak_mb = int(done.stdout.strip().splitlines()[-1])
    assert peak_mb < 2000, peak_mb


def _config(tmp_path, path) -> str:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"tasks": [{"name": "mine", "dataset": str(path)}], "run_dir": str(tmp_path / "r")}))
    return str(config)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.jsonl", b'{"question": "1+1 \xff", "answer": "2"}\n', r"a.jsonl line 1 is not UTF-8 text \(byte 0xff"),
        (
            "b.csv",
            b'question,answer\n2+2,4\n"1+1 \xfe",2\n',
            r"b.csv line 3 is not UTF-8 text \(byte 0xfe at column 6",
        ),
        ("c.json", b'[{"question": "\xc3(", "answer": "1"}]', r"c.json line 1 is not UTF-8 text \(byte 0xc3"),
        ("d.jsonl", b'{"question": "a", "answer": "1"}\n{"question": \n', r"d.jsonl line 2 is not JSON"),
        ("e.jsonl", b'{"question": "a", "answer": "1"}\n[1, 2]\n', r"e.jsonl line 2 is a JSON list, not an object"),
        ("f.csv", b'question,answer\n"1+1,2\n', r"f.csv line 2: a quote opened there is not closed"),
        ("g.parquet", b"PAR1 not really", r"cannot load dataset .*g.parquet: .*magic bytes"),
    ],
)
def test_a_malformed_file_is_one_line_and_exit_code_2(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    assert run(["train", "--config", _config(tmp_path, path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert re.search(message, err), err


# -- text that arrives as bytes, and quotes that swallow rows (issue #36) ----------------------------------
def _export(tmp_path, path) -> int:
    """``polyrl tasks export`` of one problem of the dataset task ``mine`` at ``path`` (loads every row)."""
    args = ["tasks", "export", "--config", _config(tmp_path, path), "--tasks", "mine", "--n", "1"]
    return run([*args, "--out", str(tmp_path / "out.jsonl")])


def _parquet(path, columns: dict) -> str:
    """A parquet file whose columns keep the arrow types given (binary stays binary)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)
    return str(path)


def test_a_binary_parquet_column_is_read_as_utf8_text(tmp_path):
    import pyarrow as pa

    n = 20
    path = _parquet(
        tmp_path / "b.parquet",
        {
            "question": pa.array([f"What is {i} plus {i}?".encode() for i in range(n)], pa.binary()),
            "answer": pa.array([str(2 * i).encode() for i in range(n)], pa.binary()),
        },
    )
    task = dataset_task("test_binary", DatasetSpec(path=path, verifier="numeric", eval_fraction=0.3))
    problem = task.generate(0)
    assert problem.question.startswith("What is ") and problem.answer.isdigit()
    assert task.verify(problem, f"<answer>{problem.answer}</answer>").correct


@pytest.mark.parametrize("verifier", ["numeric", "exact"])
def test_a_decimal_parquet_answer_column_is_read_as_the_number_it_holds(tmp_path, verifier):
    """Issue #43: a ``decimal128`` column became ``'"2.00"'`` (JSON of the Decimal, quotes included): ``numeric``
    refused the column and ``exact`` never matched. Its number is written as a float's would be (``2.00`` → ``2``,
    ``2.50`` → ``2.5``), exactly (no rounding of 38 digits)."""
    import decimal

    import pyarrow as pa

    n = 20
    answers = [decimal.Decimal(f"{i}.{'50' if i % 2 else '00'}") for i in range(n)]
    path = _parquet(
        tmp_path / "d.parquet",
        {
            "question": [f"What is {i} and a bit?" for i in range(n)],
            "answer": pa.array(answers, pa.decimal128(10, 2)),
            "level": pa.array([decimal.Decimal(i) / 4 for i in range(n)], pa.decimal128(10, 2)),
        },
    )
    spec = DatasetSpec(path=path, verifier=verifier, eval_fraction=0.3, difficulty_column="level")
    task = dataset_task(f"test_decimal_{verifier}", spec)
    rows = task.rows.splits["train"] + task.rows.splits["eval"]
    assert sorted(r.target for r in rows) == sorted(str(i) + (".5" if i % 2 else "") for i in range(n))
    problem = task.generate(0)
    assert task.verify(problem, f"<answer>{problem.answer}</answer>").correct


def test_binary_choices_are_read_as_utf8_text(tmp_path):
    import pyarrow as pa

    n = 20
    path = _parquet(
        tmp_path / "c.parquet",
        {
            "question": [f"Pick one ({i})" for i in range(n)],
            "options": pa.array([[b"yes", "n\u00e9".encode()]] * n, pa.list_(pa.binary())),
            "answer": pa.array(["n\u00e9".encode()] * n, pa.binary()),
        },
    )
    task = dataset_task("test_binary_choices", DatasetSpec(path=path, choices="options", eval_fraction=0.3))
    problem = task.generate(0)
    assert problem.question.endswith("A. yes\nB. n\u00e9") and problem.answer == "B"


def test_a_binary_parquet_column_that_is_not_utf8_is_one_line_naming_the_row_and_column(tmp_path, capsys):
    import pyarrow as pa

    rows = [b"2", b"4", b"\xff6"]
    path = _parquet(tmp_path / "b.parquet", {"question": ["1+1", "2+2", "3+3"], "answer": pa.array(rows, pa.binary())})
    assert _export(tmp_path, path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "b.parquet row 2: column 'answer' holds bytes that are not UTF-8 text (byte 0xff at 0)" in err


def test_a_csv_quote_that_swallows_the_next_row_is_one_line_naming_the_file_and_line(tmp_path, capsys):
    """An opening quote with no closing one merges each pair of rows (200 rows would load as 100)."""
    path = tmp_path / "q.csv"
    path.write_text("question,answer\n" + "".join(f'"What is {i} plus {i}?,{2 * i}\n' for i in range(200)))
    assert _export(tmp_path, path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"dataset file {path} line 2: a quote opened there is not closed" in err


def test_quotes_csv_allows_are_accepted(tmp_path):
    """Quoted fields spanning lines, doubled quotes inside them, and a bare quote inside an unquoted field."""
    path = tmp_path / "ok.csv"
    rows = "".join(f'"What is {i}\nplus {i}?",{2 * i}\n"a ""quoted"" {i}",{i}\nits 5" long {i},5\n' for i in range(10))
    path.write_text("question,answer\n" + rows)
    task = dataset_task("test_quotes", DatasetSpec(path=str(path), eval_fraction=0.3))
    assert len(task.rows.splits["train"]) + len(task.rows.splits["eval"]) == 30


def test_a_problem_file_with_binary_text_columns_loads_as_text(tmp_path):
    import pyarrow as pa

    from polyrl.tasks import get_task
    from polyrl.tasks.io import load_responses, problem_row

    problem = get_task("addition").generate(0)
    row = {k: v.encode() if isinstance(v, str) else v for k, v in problem_row(problem, "<answer>7</answer>").items()}
    path = _parquet(tmp_path / "p.parquet", {k: pa.array([v]) for k, v in row.items()})
    [(loaded, response)] = load_responses(path)
    assert loaded == problem and response == "<answer>7</answer>"
