"""Arithmetic tasks: reference solutions score 1, other valid answers score 1, wrong ones score 0."""

import pytest

from polyrl import get_task
from polyrl.tasks import Problem

TASKS = [
    "addition",
    "multiplication",
    "expression_evaluation",
    "modular_arithmetic",
    "base_conversion",
    "linear_equation",
    "gcd_lcm",
    "countdown",
    "game24",
]


def verdict(task, problem, answer):
    return task.verify(problem, f"<answer>{answer}</answer>")


def problem_for(name, answer, question="q"):
    return Problem(name, question, question, answer, None, 0, "train", None, {})


def test_integer_answers_accept_plain_formatting_and_reject_others():
    task = get_task("multiplication")
    p = problem_for("multiplication", 1234567)
    assert verdict(task, p, "1,234,567").score == 1.0
    assert verdict(task, p, "1234568").reason == "wrong"
    assert verdict(task, p, "about 1234567").reason == "malformed"


def test_expression_evaluation_respects_precedence():
    task = get_task("expression_evaluation")
    p = task.generate(3, "medium")
    assert p.answer == int(p.solution)
    assert "(" in task.generate(0, "hard").question or any("(" in task.generate(s, "hard").question for s in range(5))
    assert verdict(task, problem_for("expression_evaluation", 14), "14").score == 1.0


def test_modular_arithmetic_wants_the_least_residue():
    task = get_task("modular_arithmetic")
    p = problem_for("modular_arithmetic", 3)
    assert verdict(task, p, "3").score == 1.0
    assert verdict(task, p, "10").score == 0.0  # congruent but not reduced


def test_base_conversion_accepts_prefix_case_and_leading_zeros():
    task = get_task("base_conversion")
    p = problem_for("base_conversion", {"digits": "ff", "base": 16})
    for ok in ["ff", "FF", "0xff", "00ff"]:
        assert verdict(task, p, ok).score == 1.0, ok
    assert verdict(task, p, "fg").reason == "malformed"
    assert verdict(task, p, "fe").reason == "wrong"


def test_linear_equation_accepts_equivalent_forms():
    task = get_task("linear_equation")
    p = problem_for("linear_equation", [7, 4])
    for ok in ["7/4", "x=7/4", "x = 1.75", "14/8"]:
        assert verdict(task, p, ok).score == 1.0, ok
    assert verdict(task, p, "1.7").reason == "wrong"
    assert verdict(task, p, "x=1e5").reason == "malformed"


def test_linear_equation_hard_mixes_fractional_solutions():
    task = get_task("linear_equation")
    assert any(task.generate(s, "hard").answer[1] != 1 for s in range(30))


def test_countdown_accepts_any_expression_reaching_the_target():
    task = get_task("countdown")
    p = problem_for("countdown", {"target": 24, "numbers": [2, 3, 4, 6, 10]})
    for ok in ["4*6", "(10+2)*(6-4)", "2*3*4", "(10-6)*3*2 = 24", "6 × 4", "(6/(3-2))*4"]:
        assert verdict(task, p, ok).score == 1.0, ok


def test_countdown_rejects_reused_or_foreign_numbers_and_division_by_zero():
    task = get_task("countdown")
    p = problem_for("countdown", {"target": 24, "numbers": [2, 3, 4, 6, 10]})
    assert verdict(task, p, "6*4*1").reason == "wrong_numbers"
    assert verdict(task, p, "6+6+6+6").reason == "wrong_numbers"
    assert verdict(task, p, "4/(3-3)").reason in ("wrong_numbers", "division_by_zero")
    assert verdict(task, p, "4/(6-6)").score == 0.0
    assert verdict(task, p, "10/(6-2*3)").reason == "division_by_zero"


def test_countdown_gives_capped_credit_for_near_misses():
    task = get_task("countdown")
    p = problem_for("countdown", {"target": 24, "numbers": [2, 3, 4, 6, 10]})
    near = verdict(task, p, "10+6+4+2+3")  # 25
    assert near.reason == "partial" and near.score == pytest.approx(0.45)
    assert verdict(task, p, "10*6").score == 0.0


def test_game24_needs_every_number_exactly_once():
    task = get_task("game24")
    p = problem_for("game24", {"target": 24, "numbers": [1, 3, 4, 6]})
    assert verdict(task, p, "6/(1-3/4)").score == 1.0  # the fraction route a different answer takes
    assert verdict(task, p, "(1+3)*6*4/4").reason == "wrong_numbers"
    assert verdict(task, p, "4*6").reason == "wrong_numbers"
    assert verdict(task, p, "(1+3)*6+4").reason == "wrong"


@pytest.mark.parametrize(
    "junk",
    [
        "(" * 10_000 + "1" + ")" * 10_000,
        "9" * 1_000_000,
        "10**100000",
        "1" + "*99999" * 30,
        "\x00\xff\x80junk",
        "2--2",
    ],
)
@pytest.mark.parametrize("name", ["countdown", "game24"])
def test_adversarial_expressions_are_rejected_quickly(name, junk):
    task = get_task(name)
    p = task.generate(0, "hard")
    assert verdict(task, p, junk).score == 0.0


@pytest.mark.parametrize("name", TASKS)
def test_garbage_scores_zero(name):
    task = get_task(name)
    p = task.generate(0, "medium")
    for junk in ["", "banana", "9" * 100_000, "\x00\x01"]:
        assert verdict(task, p, junk).score == 0.0
