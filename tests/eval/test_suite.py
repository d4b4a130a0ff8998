"""Suite files: validation in one line, reproducible problems."""

import pytest

from polyrl.cli import run
from polyrl.errors import UserError
from polyrl.eval.suite import load_suite, parse_suite, suite_items


def test_suite_records_seeds_so_problems_are_reproducible():
    data = {"tasks": [{"name": "addition", "difficulties": ["easy", 0.7], "n": 3, "seed_start": 100}]}
    first, second = suite_items(parse_suite(data)), suite_items(parse_suite(data))
    assert [i.problem.seed for i in first] == [100, 101, 102, 100, 101, 102]
    assert [i.problem.prompt for i in first] == [i.problem.prompt for i in second]
    assert {i.problem.split for i in first} == {"eval"}


@pytest.mark.parametrize(
    "data, message",
    [
        ({"tasks": []}, "tasks: List should have at least 1 item"),
        ({"tasks": [{"name": "addition", "n": 0}]}, "tasks.0.n"),
        ({"tasks": [{"name": "addition"}], "samples": "many"}, "samples"),
        ({"tasks": [{"name": "additon"}]}, "unknown task 'additon'"),
        ({"tasks": [{"name": "addition", "difficulties": [3]}]}, "outside [0, 1]"),
        ({"tasks": [{"name": "addition"}], "colour": "red"}, "colour"),
        (["addition"], "a suite is a YAML mapping"),
    ],
)
def test_malformed_suite_is_one_user_error(data, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")) as exc:
        parse_suite(data)
    assert "\n" not in str(exc.value)


def test_the_shipped_suites_are_valid():
    from pathlib import Path

    suites = sorted((Path(__file__).parents[2] / "configs" / "suites").glob("*.yaml"))
    assert suites, "configs/suites/ holds no suite"
    for path in suites:
        assert load_suite(path).tasks


def test_cli_malformed_suite_exits_2_with_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks:\n  - {name: addition, n: -1}\n")
    assert run(["eval", "--model", str(tmp_path), "--suite", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("polyrl: error: invalid suite") and "\n" not in err


def test_cli_yaml_syntax_error_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks: [\n")
    assert run(["eval", "--model", str(tmp_path), "--suite", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
