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


@pytest.fixture(autouse=True)
def _forget_registered_datasets():
    from polyrl.tasks.registry import TASKS

    before = set(TASKS.names())
    yield
    for name in set(TASKS.names()) - before:
        TASKS.remove(name)


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
        ("f.csv", b'question,answer\n"1+1,2\n', r"cannot load dataset .*f.csv: .*EOF inside string"),
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
