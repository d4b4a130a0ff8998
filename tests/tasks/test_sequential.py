"""Sequential tasks: reference solutions, alternative valid answers, wrong and malformed answers, difficulty."""

import pytest

from polyrl import get_task
from polyrl.tasks import Problem


def score(name, problem, answer):
    v = get_task(name).verify(problem, f"<answer>{answer}</answer>")
    return v.score, v.reason


def problem(name, answer):
    return Problem.from_dict({"task": name, "question": "hand-written", "answer": answer})


def test_existing_tasks_keep_their_behaviour():
    assert get_task("reverse_letters").generate(0, "easy").question.startswith("reverse ")
    p = problem("sort_digits", [1, 2, 3])
    assert score("sort_digits", p, "1 2 3") == (1.0, "correct")


def test_reverse_words_partial_credit_for_words_in_place():
    p = problem("reverse_words", ["c", "b", "a"])
    assert score("reverse_words", p, "c  b a") == (1.0, "correct")
    assert score("reverse_words", p, "c a b") == (pytest.approx(0.5 / 3), "partial")
    assert score("reverse_words", p, "c b") == (0.0, "wrong")


def test_run_length_encoding_accepts_both_orders_and_omitted_ones():
    p = problem("run_length_encoding", "aaabcc")
    for answer in ["3a1b2c", "3a b 2c", "3ab2c", "a3b1c2", "a3bc2", "3a, 1b, 2c"]:
        assert score("run_length_encoding", p, answer) == (1.0, "correct"), answer


def test_run_length_encoding_rejects_split_runs_and_wrong_counts():
    p = problem("run_length_encoding", "aaabcc")
    assert score("run_length_encoding", p, "2a1a1b2c") == (0.0, "wrong")  # decodes right, runs not maximal
    assert score("run_length_encoding", p, "3a1b3c") == (0.0, "wrong")
    assert score("run_length_encoding", p, "999999a") == (0.0, "wrong")
    assert score("run_length_encoding", p, "3a-1b") == (0.0, "malformed")


def test_list_ops_compose_left_to_right():
    from polyrl.tasks.builtin.sequential import _apply_list_op

    assert _apply_list_op([1, 2, 3, 4], "rotl1") == [2, 3, 4, 1]
    assert _apply_list_op([1, 2, 3, 4], "rotr1") == [4, 1, 2, 3]
    assert _apply_list_op([3, 1, 3, 2, 1], "dedupe") == [3, 1, 2]
    p = problem("list_ops", [3, 1, 2])
    assert score("list_ops", p, "[3, 1, 2]") == (1.0, "correct")
    assert score("list_ops", p, "3 1 2 2") == (0.0, "wrong")


HANOI = {"disks": 2, "source": "A", "target": "C"}


def test_hanoi_accepts_optimal_moves_in_several_spellings():
    p = problem("tower_of_hanoi", HANOI)
    for answer in ["AB AC BC", "A->B, A->C, B->C", "ab ac bc", "A>B A>C B>C"]:
        assert score("tower_of_hanoi", p, answer) == (1.0, "correct"), answer


def test_hanoi_partial_credit_for_a_longer_legal_solution():
    p = problem("tower_of_hanoi", HANOI)
    assert score("tower_of_hanoi", p, "AB BC AB CA BC AC") == (0.25, "partial")


def test_hanoi_rejects_illegal_moves_and_unfinished_towers():
    p = problem("tower_of_hanoi", HANOI)
    assert score("tower_of_hanoi", p, "AB AB BC") == (0.0, "wrong")  # big disk onto small one
    assert score("tower_of_hanoi", p, "BC AC BC") == (0.0, "wrong")  # moves from an empty peg
    assert score("tower_of_hanoi", p, "AB AC") == (0.0, "wrong")
    assert score("tower_of_hanoi", p, "AA AB AC BC") == (0.0, "wrong")
    assert score("tower_of_hanoi", p, "AB AC B") == (0.0, "malformed")
    assert score("tower_of_hanoi", p, "AD") == (0.0, "malformed")


def test_next_term_recognises_each_rule_family():
    from polyrl.tasks.builtin.sequential import _next_term_candidates

    assert _next_term_candidates([2, 4, 6, 8]) == {10}
    assert _next_term_candidates([3, -6, 12, -24]) == {48}
    assert _next_term_candidates([1, 2, 5, 10, 17]) == {26}  # second differences 2
    assert _next_term_candidates([2, 3, 5, 8, 13]) == {21}


def test_next_term_scores_the_rule_not_the_string():
    p = problem("next_term", [2, 4, 6, 8])
    assert score("next_term", p, "10") == (1.0, "correct")
    assert score("next_term", p, "+10") == (1.0, "correct")
    assert score("next_term", p, "12") == (0.0, "wrong")
    assert score("next_term", p, "ten") == (0.0, "malformed")
