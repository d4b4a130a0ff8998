"""Crypto tasks: reference solutions score 1, other valid answers score 1, wrong ones score 0."""

import pytest

from polyrl import get_task
from polyrl.tasks import Problem
from polyrl.tasks.builtin.crypto import shift_letters

TASKS = ["caesar", "vigenere", "atbash", "letter_numbers", "cryptarithm"]


def verdict(task, problem, answer):
    return task.verify(problem, f"<answer>{answer}</answer>")


def problem_for(name, answer):
    return Problem(name, "q", "q", answer, None, 0, "train", None, {})


@pytest.mark.parametrize("name", TASKS)
def test_garbage_scores_zero(name):
    task = get_task(name)
    p = task.generate(0, "medium")
    for junk in ["9" * 100_000, "\x00\x01", "A=" * 5000, "x" * 1_000]:
        assert verdict(task, p, junk).score == 0.0


def test_caesar_decodes_the_classic_example():
    task = get_task("caesar")
    assert shift_letters("hello world", [3]) == "khoor zruog"
    p = problem_for("caesar", "hello world")
    assert verdict(task, p, "Hello   World").score == 1.0


def test_cipher_partial_credit_is_the_halved_share_of_right_letters():
    task = get_task("caesar")
    p = problem_for("caesar", "hello")
    v = verdict(task, p, "hellp")
    assert v.reason == "partial" and v.score == pytest.approx(0.4)
    assert verdict(task, p, "hell").reason == "wrong"


def test_vigenere_key_skips_spaces():
    assert shift_letters("ab cd", [0, 1]) == "ac ce"
    task = get_task("vigenere")
    p = task.generate(2, "medium")
    key = p.question.split()[1].removeprefix("key=")
    cipher = p.question.split(" ", 2)[2]
    assert shift_letters(cipher, [-(ord(c) - 97) for c in key]) == p.answer


def test_atbash_is_its_own_inverse():
    task = get_task("atbash")
    p = task.generate(5, "hard")
    mirror = str.maketrans("abcdefghijklmnopqrstuvwxyz", "zyxwvutsrqponmlkjihgfedcba")
    assert verdict(task, p, p.question.removeprefix("atbash ").translate(mirror)).score == 1.0


def test_letter_numbers_accepts_any_separator_when_encoding():
    task = get_task("letter_numbers")
    p = problem_for("letter_numbers", {"encode": True, "codes": [3, 1, 2]})
    for ok in ["3 1 2", "3-1-2", "3, 1, 2"]:
        assert verdict(task, p, ok).score == 1.0
    assert verdict(task, p, "3 1 2 0").reason == "wrong"
    decode = problem_for("letter_numbers", {"encode": False, "codes": [3, 1, 2]})
    assert verdict(task, decode, "CAB").score == 1.0 and verdict(task, decode, "cba").score == 0.0


SEND_MORE = problem_for("cryptarithm", {"addends": ["SEND", "MORE"], "total": "MONEY"})
AB = problem_for("cryptarithm", {"addends": ["A", "B"], "total": "CD"})  # many solutions: 9+1=10, 5+7=12, ...


def test_cryptarithm_accepts_any_valid_assignment():
    task = get_task("cryptarithm")
    assert verdict(task, SEND_MORE, "S=9 E=5 N=6 D=7 M=1 O=0 R=8 Y=2").score == 1.0
    assert verdict(task, AB, "A=9, B=3, C=1, D=2").score == 1.0
    assert verdict(task, AB, "a: 5; b: 7; c: 1; d: 2").score == 1.0


def test_cryptarithm_rejects_broken_rules():
    task = get_task("cryptarithm")
    assert verdict(task, AB, "A=9 B=3 C=1 D=3").reason == "invalid_digits"
    assert verdict(task, AB, "A=9 B=3 C=1").reason == "wrong_letters"
    assert verdict(task, AB, "A=8 B=3 C=1 D=2").reason == "wrong"
    assert verdict(task, SEND_MORE, "S=0 E=5 N=6 D=7 M=1 O=9 R=8 Y=2").reason == "leading_zero"
    assert verdict(task, AB, "A=12 B=3 C=1 D=2").reason == "invalid_digits"
