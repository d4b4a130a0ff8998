"""The Task protocol: difficulty resolution, determinism, splits, answer extraction, verdicts."""

import pytest

from polyrl import UserError, get_task
from polyrl.tasks import AnswerFormat, Param
from polyrl.tasks.base import DifficultySpace


def test_param_interpolates_monotonically_and_hits_both_ends():
    p = Param("digits", 2, 12)
    values = [p.at(k / 100) for k in range(101)]
    assert values[0] == 2 and values[-1] == 12
    assert values == sorted(values)


def test_decreasing_param_is_monotone_too():
    p = Param("hints", 40, 20)
    values = [p.at(k / 10) for k in range(11)]
    assert values[0] == 40 and values[-1] == 20
    assert values == sorted(values, reverse=True)


def test_presets_map_to_knob_values():
    space = DifficultySpace((Param("n", 0, 10),))
    assert space.resolve("easy") == {"n": 0}
    assert space.resolve("medium") == {"n": 5}
    assert space.resolve("hard") == {"n": 10}
    assert space.resolve("0.3") == {"n": 3}


@pytest.mark.parametrize("bad", [-0.1, 1.5, "extreme", float("nan"), {"nope": 1}, {"n": 11}, {"n": 2.5}, True])
def test_invalid_difficulty_is_a_user_error(bad):
    space = DifficultySpace((Param("n", 0, 10),))
    with pytest.raises(UserError):
        space.resolve(bad)


def test_explicit_parameters_override_medium():
    assert get_task("addition").generate(0, {"digits": 3}).params == {"digits": 3, "terms": 3}


def test_generation_is_deterministic_and_splits_differ():
    t = get_task("addition")
    assert t.generate(7, "hard") == t.generate(7, "hard")
    assert t.generate(7, "hard", split="eval").question != t.generate(7, "hard").question


def test_unknown_task_suggests_close_names():
    with pytest.raises(UserError, match="did you mean addition"):
        get_task("additon")


@pytest.mark.parametrize(
    "response,answer,reason,format_ok",
    [
        ("<answer>42</answer>", "42", "ok", True),
        ("think <answer> 42 </answer>", "42", "ok", True),
        ("<answer>1</answer><answer>42</answer>", "42", "multiple_answers", False),
        ("<answer>42", None, "unclosed_tag", False),
        ("42", None, "no_answer", False),
        ("<answer>  </answer>", None, "empty_answer", False),
    ],
)
def test_tag_extraction(response, answer, reason, format_ok):
    ext = AnswerFormat("tags").extract(response)
    assert (ext.answer, ext.reason, ext.format_ok) == (answer, reason, format_ok)


def test_boxed_extraction_handles_nested_braces():
    assert AnswerFormat("boxed").extract(r"so \boxed{\frac{1}{2}}").answer == r"\frac{1}{2}"
    assert AnswerFormat("boxed").extract(r"\boxed{1").reason == "unclosed_tag"


def test_last_line_extraction():
    assert AnswerFormat("last_line").extract("work\n\n 17 \n").answer == "17"


def test_verdict_separates_format_from_correctness():
    t = get_task("addition")
    p = t.generate(1, "easy")
    right = t.verify(p, f"<answer>{p.solution}</answer>")
    wrong = t.verify(p, "<answer>-1</answer>")
    unformatted = t.verify(p, p.solution)
    assert (right.score, right.correct, right.reason, right.format_ok) == (1.0, True, "correct", True)
    assert (wrong.score, wrong.reason, wrong.format_ok) == (0.0, "wrong", True)
    assert (unformatted.score, unformatted.reason, unformatted.format_ok) == (0.0, "no_answer", False)


def test_malformed_answer_is_reported_not_raised():
    t = get_task("addition")
    p = t.generate(1, "easy")
    v = t.verify(p, "<answer>" + "9" * 100_000 + "</answer>")
    assert (v.score, v.reason) == (0.0, "malformed")


def test_problem_round_trips_through_dict():
    from polyrl.tasks import Problem

    p = get_task("sort_digits").generate(3, "medium")
    assert Problem.from_dict(p.to_dict()) == p
