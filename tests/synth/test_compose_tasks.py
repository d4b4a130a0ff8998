"""Compositional string tasks: primitives, chains h(x) = g(f(x)), the held-out split, and compose/mix."""

import random

import pytest

from polyrl.errors import UserError
from polyrl.tasks import get_task, list_tasks
from polyrl.tasks.builtin.compositions import (
    PRIMITIVES,
    all_chains,
    apply_chain,
    held_out_chains,
    is_held_out,
    parse_chain,
    training_chains,
)


@pytest.mark.parametrize(
    ("op", "text", "want"),
    [
        ("rev", "abcd", "dcba"),
        ("sort", "dbca", "abcd"),
        ("shift", "azbz", "baca"),
        ("rot", "abcd", "bcda"),
        ("swap", "abcde", "badce"),
        ("up", "abc", "ABC"),
    ],
)
def test_each_primitive_transforms_as_documented(op, text, want):
    assert apply_chain((op,), text) == want


def test_a_chain_applies_its_ops_left_to_right():
    # rev first: abcd -> dcba; then rot: cbad
    assert apply_chain(("rev", "rot"), "abcd") == "cbad"
    assert apply_chain(("rot", "rev"), "abcd") == "adcb"


def test_every_primitive_is_a_registered_task():
    names = {t.name for t in list_tasks(category="compose")}
    assert {f"compose/{op}" for op in PRIMITIVES} | {"compose/mix"} == names


def test_any_chain_name_is_a_task_whose_reference_answer_scores_one():
    task = get_task("compose/rev+shift+up")
    problem = task.generate(3, {"length": 5})
    assert problem.question.startswith("rev shift up: ")
    word = problem.question.split(": ")[1]
    assert problem.answer == apply_chain(("rev", "shift", "up"), word)
    assert task.verify(problem, task.reference_response(problem)).correct


def test_a_chain_task_gives_half_credit_per_position_at_the_right_length():
    task = get_task("compose/rev")
    problem = task.generate(0, {"length": 4})
    wrong_last = problem.answer[:3] + ("a" if problem.answer[3] != "a" else "b")
    assert task.verify(problem, f"<answer>{wrong_last}</answer>").score == pytest.approx(0.5 * 3 / 4)
    assert task.verify(problem, f"<answer>{problem.answer}x</answer>").score == 0.0


def test_unknown_ops_and_too_deep_chains_are_user_errors():
    with pytest.raises(UserError, match="unknown string op"):
        get_task("compose/rev+flip")
    with pytest.raises(UserError, match="at most"):
        parse_chain("compose/rev+up+rev+up+rev")


def test_chains_never_repeat_an_op_back_to_back():
    assert len(all_chains(1)) == 6
    assert len(all_chains(2)) == 6 * 5
    assert len(all_chains(3)) == 6 * 5 * 5
    assert ("rev", "rev") not in all_chains(2)


def test_held_out_and_training_chains_partition_each_depth():
    for depth in (2, 3):
        held, train = set(held_out_chains(depth)), set(training_chains(depth))
        assert held and train and not held & train
        assert held | train == set(all_chains(depth))
    assert not any(is_held_out((op,)) for op in PRIMITIVES)


def test_compose_mix_never_draws_a_held_out_chain():
    task = get_task("compose/mix")
    held = {" ".join(c) for c in held_out_chains(2)}
    ops = {task.generate(seed, {"depth": 2, "length": 4}).question.split(":")[0] for seed in range(300)}
    assert ops and not ops & held
    assert len(ops) == len(training_chains(2))  # 300 draws reach all 26 training chains


def test_compose_mix_depth_sets_the_number_of_ops():
    task = get_task("compose/mix")
    for depth in (1, 2, 3):
        question = task.generate(random.Random(depth).randrange(1000), {"depth": depth, "length": 4}).question
        assert len(question.split(":")[0].split()) == depth
