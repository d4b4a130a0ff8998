"""Search tasks: reference solutions, alternative valid answers, wrong and malformed answers, difficulty."""

import pytest

from polyrl import get_task
from polyrl.tasks import Problem


def score(name, problem, answer):
    v = get_task(name).verify(problem, f"<answer>{answer}</answer>")
    return v.score, v.reason


def problem(name, answer):
    return Problem.from_dict({"task": name, "question": "hand-written", "answer": answer})


def test_subset_sum_accepts_any_subset_reaching_the_target():
    p = problem("subset_sum", {"numbers": [3, 5, 2, 7, 5], "target": 7})
    for answer in ["5 2", "7", "[2, 5]"]:
        assert score("subset_sum", p, answer) == (1.0, "correct")
    assert score("subset_sum", problem("subset_sum", {"numbers": [3, 5, 2, 7, 5], "target": 10}), "5 5") == (
        1.0,
        "correct",
    )


def test_subset_sum_rejects_numbers_not_offered_or_reused():
    p = problem("subset_sum", {"numbers": [3, 5, 2, 7], "target": 10})
    assert score("subset_sum", p, "5 5") == (0.0, "wrong")  # 5 is offered once
    assert score("subset_sum", p, "4 6") == (0.0, "wrong")
    assert score("subset_sum", p, "3 5") == (0.0, "wrong")
    assert score("subset_sum", p, "3 + 7") == (0.0, "malformed")


KNAPSACK = {"items": [[2, 3], [2, 3], [3, 4], [4, 5]], "capacity": 4, "optimum": 6}


def test_knapsack_accepts_any_optimal_packing_and_credits_feasible_ones():
    from polyrl.tasks.builtin.search_puzzles import _knapsack_optimum

    assert _knapsack_optimum(KNAPSACK["items"], 4) == (6, [1, 2])
    p = problem("knapsack", {**KNAPSACK, "items": [[2, 3], [2, 3], [4, 6]]})
    assert score("knapsack", p, "1 2") == (1.0, "correct")
    assert score("knapsack", p, "3") == (1.0, "correct")
    assert score("knapsack", problem("knapsack", KNAPSACK), "4") == (pytest.approx(0.5 * 5 / 6), "partial")


def test_knapsack_rejects_overweight_repeated_and_unknown_items():
    p = problem("knapsack", KNAPSACK)
    assert score("knapsack", p, "1 3") == (0.0, "wrong")  # weight 5 > 4
    assert score("knapsack", p, "1 1") == (0.0, "malformed")
    assert score("knapsack", p, "0 5") == (0.0, "malformed")


# Only the centre and the sum are given: all eight 3x3 normal magic squares are valid completions.
OPEN_MAGIC = {"puzzle": [[0, 0, 0], [0, 5, 0], [0, 0, 0]], "sum": 15}


def test_magic_square_accepts_any_completion():
    p = problem("magic_square", OPEN_MAGIC)
    assert score("magic_square", p, "2 7 6/9 5 1/4 3 8") == (1.0, "correct")
    assert score("magic_square", p, "8 1 6\n3 5 7\n4 9 2") == (1.0, "correct")
    assert score("magic_square", p, "8,1,6,3,5,7,4,9,2") == (1.0, "correct")


def test_magic_square_rejects_broken_sums_repeats_and_changed_givens():
    p = problem("magic_square", OPEN_MAGIC)
    assert score("magic_square", p, "2 7 6/9 5 1/4 8 3") == (0.0, "wrong")  # columns and diagonals break
    assert score("magic_square", p, "5 5 5/5 5 5/5 5 5") == (0.0, "wrong")  # magic but not distinct
    assert score("magic_square", p, "4 9 2/3 5 7/8 1 6") == (1.0, "correct")
    fixed = problem("magic_square", {"puzzle": [[2, 0, 0], [0, 5, 0], [0, 0, 0]], "sum": 15})
    assert score("magic_square", fixed, "4 9 2/3 5 7/8 1 6") == (0.0, "wrong")
    assert score("magic_square", p, "2 7 6/9 5 1") == (0.0, "malformed")


def test_generated_4x4_squares_are_magic_with_distinct_entries():
    from polyrl.tasks.builtin.search_puzzles import _is_magic

    t = get_task("magic_square")
    for seed in range(20):
        p = t.generate(seed, "hard")
        square = [[int(x) for x in row.split()] for row in p.solution.split("/")]
        assert len(square) == 4 and _is_magic(square, p.answer["sum"])
        assert len({x for row in square for x in row}) == 16


def test_letter_count():
    p = problem("letter_count", 3)
    assert score("letter_count", p, "3") == (1.0, "correct")
    assert score("letter_count", p, "2") == (0.0, "wrong")
    assert score("letter_count", p, "three") == (0.0, "malformed")
    assert get_task("letter_count").generate(0, {"length": 4, "alphabet": 4}).question.startswith("count ")
