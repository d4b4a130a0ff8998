"""Answers that once scored 1.0 without being right (issue #13), and their neighbours of the same kind."""

import pytest

from polyrl import get_task
from polyrl.tasks import Problem


def verdict(name, answer, spec):
    problem = Problem.from_dict({"task": name, "question": "hand-written", "answer": spec})
    return get_task(name).verify(problem, f"<answer>{answer}</answer>")


@pytest.mark.parametrize("answer", ["0d2b3d", "2b0a3d", "b2d0d3", "2b3d0d", "02b3d", "b02d3"])
def test_run_length_encoding_rejects_zero_counts_and_leading_zeros(answer):
    assert verdict("run_length_encoding", answer, "bbddd").score == 0.0


@pytest.mark.parametrize("answer", ["2b3d", "b2d3", "2b 3d", "b2 d3", "b2d3 "])
def test_run_length_encoding_still_accepts_real_encodings(answer):
    assert verdict("run_length_encoding", answer, "bbddd").correct


KK = {"people": ["A", "B"], "roles": ["knave", "knight"]}


@pytest.mark.parametrize(
    "answer", ["A=knave a=knight B=knight", "a=knight A=knave B=knight", "A=knave B=knight b=knave"]
)
def test_knights_knaves_rejects_a_name_given_twice_in_two_cases(answer):
    v = verdict("knights_knaves", answer, KK)
    assert (v.score, v.reason) == (0.0, "malformed")


def test_knights_knaves_accepts_either_case_once():
    assert verdict("knights_knaves", "a=knave b=knight", KK).correct
    assert verdict("knights_knaves", "A is a knave, B is a knight", KK).correct


def test_cryptarithm_rejects_a_letter_given_twice_in_two_cases():
    spec = {"addends": ["A", "B"], "total": "C"}  # 1 + 2 = 3
    assert verdict("cryptarithm", "A=1 B=2 C=3", spec).correct
    assert verdict("cryptarithm", "A=5 a=1 B=2 C=3", spec).score == 0.0
    assert verdict("cryptarithm", "A=1 B=2 C=3 c=4", spec).score == 0.0


@pytest.mark.parametrize("name", ["countdown", "game24"])
def test_target_puzzles_reject_a_wrong_stated_result(name):
    spec = {"target": 24, "numbers": [4, 6]}
    assert verdict(name, "4*6", spec).correct
    assert verdict(name, "4*6 = 24", spec).correct
    assert verdict(name, "4*6 =", spec).correct  # a bare "=" states nothing
    for answer in ("4*6 = 25", "4*6 = 24 = 25", "4*6 = x", "4*6 = 24.5"):
        v = verdict(name, answer, spec)
        assert (v.score, v.reason) == (0.0, "malformed"), answer


def test_countdown_stated_result_cannot_claim_the_target_for_a_near_miss():
    spec = {"target": 24, "numbers": [4, 5]}
    assert verdict("countdown", "4*5", spec).score == pytest.approx(0.5 * (1 - 4 / 10))
    assert verdict("countdown", "4*5 = 24", spec).score == 0.0


def test_sat_rejects_a_variable_given_twice():
    spec = {"variables": 2, "clauses": [[1, 2]]}
    assert verdict("sat", "a=1 b=0", spec).correct
    assert verdict("sat", "a=1 a=0 b=0", spec).score == 0.0
    assert verdict("sat", "a !a b", spec).score == 0.0
    assert verdict("sat", "A=1 b=0", spec).reason == "unknown_variable"


def test_subset_sum_rejects_numbers_not_offered_or_reused():
    spec = {"numbers": [3, 5, 7], "target": 10}
    assert verdict("subset_sum", "3 7", spec).correct
    assert verdict("subset_sum", "5 5", spec).score == 0.0
    assert verdict("subset_sum", "3 7 0", spec).score == 0.0
    assert verdict("subset_sum", "12 -2", spec).score == 0.0
