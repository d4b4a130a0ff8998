"""Aggregation: accuracy, unbiased pass@k, majority vote, per-group rows, comparison tables."""

import pytest

from polyrl.errors import UserError
from polyrl.eval.results import aggregate, compare_table, majority_answer, normalize_answer, problem_key
from polyrl.eval.suite import parse_suite, suite_items
from polyrl.tasks import get_task


def test_normalize_answer_ignores_case_and_spacing():
    assert normalize_answer("  Hello\n  World ") == "hello world"


def test_majority_answer_counts_normalized_votes_and_skips_missing():
    assert majority_answer(["5", " 5 ", None, "7"]) == "5"
    assert majority_answer([None, None]) is None


def test_majority_tie_goes_to_the_answer_seen_first():
    assert majority_answer(["b", "a", "a", "b"]) == "b"


def _record(item, sample, answer, tokens=4, format_ok=True):
    correct = answer is not None and answer == item.problem.solution
    return {
        "problem_key": problem_key(item),
        "sample": sample,
        "answer": answer,
        "correct": correct,
        "format_ok": format_ok,
        "tokens": tokens,
    }


def test_aggregate_matches_hand_computed_numbers():
    suite = parse_suite({"samples": 3, "tasks": [{"name": "addition", "difficulties": ["easy"], "n": 2}]})
    a, b = suite_items(suite)
    records = [
        # problem a: greedy right; samples right, right, wrong -> pass@1 2/3, pass@3 1, majority right
        _record(a, 0, a.problem.solution),
        _record(a, 1, a.problem.solution),
        _record(a, 2, a.problem.solution),
        _record(a, 3, "99999", format_ok=False),
        # problem b: greedy wrong; samples "99999", " 99999 " (same after normalizing), right -> majority wrong
        _record(b, 0, "99999"),
        _record(b, 1, "99999"),
        _record(b, 2, " 99999 ", format_ok=False),
        _record(b, 3, b.problem.solution, tokens=12),
    ]
    row = aggregate([a, b], records, k=3, tasks={"addition": get_task("addition")})["tasks"]["addition"]
    assert row["problems"] == 2
    assert row["accuracy"] == pytest.approx(0.5)
    assert row["pass@1"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert row["pass@3"] == pytest.approx(1.0)
    assert row["maj@3"] == pytest.approx(0.5)
    assert row["format_failure_rate"] == pytest.approx(2 / 8)
    assert row["mean_length"] == pytest.approx((7 * 4 + 12) / 8)


def test_aggregate_groups_by_category_difficulty_and_cell_and_skips_unfinished_problems():
    suite = parse_suite(
        {
            "tasks": [
                {"name": "addition", "difficulties": ["easy", "hard"], "n": 1},
                {"name": "caesar", "difficulties": ["easy"], "n": 1},
            ]
        }
    )
    items = suite_items(suite)
    records = [_record(items[0], 0, items[0].problem.solution), _record(items[2], 0, "zzz")]  # addition@hard missing
    out = aggregate(items, records, k=1, tasks={n: get_task(n) for n in ("addition", "caesar")})
    assert set(out["cells"]) == {"addition@easy", "caesar@easy"}
    assert out["categories"]["arithmetic"]["accuracy"] == 1.0
    assert out["categories"]["crypto"]["accuracy"] == 0.0
    assert out["difficulties"]["easy"]["problems"] == 2
    assert out["overall"]["accuracy"] == pytest.approx(0.5)
    assert out["overall"]["problems"] == 2


def _results(acc):
    return {"tasks": {"addition": {"accuracy": acc}}, "overall": {"accuracy": acc}}


def test_compare_table_shows_differences_in_points_against_the_first():
    table = compare_table({"base": _results(0.25), "rl": _results(0.5)})
    assert "| addition | 25.0% | 50.0% | +25.0 |" in table
    assert "| **overall** | 25.0% | 50.0% | +25.0 |" in table


def test_compare_table_rejects_an_unknown_metric():
    with pytest.raises(UserError, match="metric 'maj@9'"):
        compare_table({"a": _results(0.1), "b": _results(0.2)}, "maj@9")
