"""Logic tasks: reference solutions score 1, other valid answers score 1, wrong ones score 0."""

import itertools

import pytest

from polyrl import get_task
from polyrl.tasks import Problem
from polyrl.tasks.builtin.logic import evaluate

TASKS = ["boolean_evaluation", "sat", "entailment", "knights_knaves", "height_ordering"]


def verdict(task, problem, answer):
    return task.verify(problem, f"<answer>{answer}</answer>")


def problem_for(name, answer):
    return Problem(name, "q", "q", answer, None, 0, "train", None, {})


EASY_LIMITS = [
    ("boolean_evaluation", 40),
    ("sat", 40),
    ("entailment", 50),
    ("height_ordering", 40),
    ("knights_knaves", 80),
]


@pytest.mark.parametrize("name", TASKS)
def test_garbage_scores_zero(name):
    task = get_task(name)
    p = task.generate(0, "medium")
    for junk in ["banana split", "9" * 100_000, "\x00\x01", "a=" * 5000]:
        assert verdict(task, p, junk).score == 0.0


def test_boolean_evaluation_accepts_truth_words():
    task = get_task("boolean_evaluation")
    p = problem_for("boolean_evaluation", True)
    for ok in ["1", "true", "True", "T"]:
        assert verdict(task, p, ok).score == 1.0
    assert verdict(task, p, "0").reason == "wrong"
    assert verdict(task, p, "maybe").reason == "malformed"


SAT = problem_for("sat", {"variables": 3, "clauses": [[1, 2], [-1, 3], [-2, -3]]})  # (a|b)&(!a|c)&(!b|!c)


def test_sat_accepts_every_satisfying_assignment():
    task = get_task("sat")
    for ok in ["a=1 b=0 c=1", "a=0, b=1, c=0", "a: true; b: false; c: true", "a !b c", "!a b !c"]:
        assert verdict(task, SAT, ok).score == 1.0, ok


def test_sat_rejects_falsifying_incomplete_and_foreign_assignments():
    task = get_task("sat")
    assert verdict(task, SAT, "a=1 b=1 c=1").reason == "wrong"
    assert verdict(task, SAT, "a=1 c=1").reason == "incomplete"
    assert verdict(task, SAT, "a=1 b=0 c=1 z=0").reason == "unknown_variable"
    assert verdict(task, SAT, "a=1 a=0 b=0 c=1").reason == "malformed"


def test_sat_hard_planted_formula_is_near_the_phase_transition():
    p = get_task("sat").generate(0, "hard")
    assert p.answer["variables"] == 20 and len(p.answer["clauses"]) == 86
    assert all(len(c) == 3 for c in p.answer["clauses"])


def test_entailment_labels_match_brute_force_and_are_balanced():
    task = get_task("entailment")
    labels = [task.generate(s, "medium").answer for s in range(200)]
    assert 70 < sum(labels) < 130
    p = problem_for("entailment", False)
    assert verdict(task, p, "no").score == 1.0 and verdict(task, p, "Yes.").score == 0.0


def test_formula_evaluation_matches_truth_tables():
    p_implies_not_q = ["->", ["var", "p"], ["not", ["var", "q"]]]
    table = {
        (a, b): evaluate(p_implies_not_q, {"p": a, "q": b}) for a, b in itertools.product((False, True), repeat=2)
    }
    assert table == {(False, False): True, (False, True): True, (True, False): True, (True, True): False}


def test_knights_knaves_solution_is_unique_by_brute_force():
    from polyrl.tasks.builtin.logic_puzzles import _statement_holds

    statements = [("is", 1, False), ("same", 0, 1)]  # A: B is a knave. B: A and B are alike.
    worlds = [
        w
        for w in itertools.product((False, True), repeat=2)
        if all(_statement_holds(s, w) == w[i] for i, s in enumerate(statements))
    ]
    assert worlds == [(True, False)]


def test_knights_knaves_accepts_several_answer_styles():
    task = get_task("knights_knaves")
    p = problem_for("knights_knaves", {"people": ["A", "B", "C"], "roles": ["knight", "knave", "knave"]})
    for ok in [
        "A=knight B=knave C=knave",
        "A: knight, B: knave, C: knave",
        "A is a knight, B is a knave and C is a knave",
        "knight knave knave",
        "a=Knight, b=Knave, c=knave",
    ]:
        assert verdict(task, p, ok).score == 1.0, ok
    assert verdict(task, p, "A=knight B=knight C=knave").reason == "wrong"
    assert verdict(task, p, "A=knight B=knave").reason == "wrong_people"
    assert verdict(task, p, "A=knight B=knave C=liar").reason == "malformed"


def test_height_ordering_answer_is_a_name_in_any_case():
    task = get_task("height_ordering")
    p = task.generate(4, "hard")
    assert verdict(task, p, p.solution.lower() + ".").score == 1.0
    wrong = next(c for c in "ABCDEFGHIJ" if c != p.answer)
    assert verdict(task, p, wrong).reason == "wrong"


def test_height_ordering_hard_asks_for_deeper_ranks():
    task = get_task("height_ordering")
    asked = [task.generate(s, "hard").question.split("; ")[-1] for s in range(40)]
    assert any(q.startswith(("2nd", "3rd", "4th", "5th")) for q in asked)
