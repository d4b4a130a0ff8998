"""Properties every registered built-in task must have, checked with hypothesis-drawn seeds and responses.

The task list is read at collection time, so a newly added task is covered without touching this file.
"""

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyrl.tasks import Problem, get_task, list_tasks
from polyrl.tasks.images import images_digest

TASKS = [cls.name for cls in list_tasks()]
SEEDS = st.integers(min_value=0, max_value=2**31 - 1)
LEVELS = st.sampled_from(["easy", "medium", "hard"])
FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ADVERSARIAL = [
    "",
    " ",
    "x" * 1_000_000,
    "\x00\x01\xff\ufffe" * 1000,
    "\u202e\u0301\U0001f600 ﷽ 𝟘𝟙",
    "<answer><answer>1</answer>",
    "<answer>1</answer></answer>",
    "<answer>",
    "</answer>",
    "<answer></answer>",
    "<answer>" + "9" * 100_000 + "</answer>",
    "<answer>" + "(" * 10_000 + ")" * 10_000 + "</answer>",
    "<answer>" + "[" * 5_000 + "</answer>",
    "<answer>" + "1" + "0" * 100_000 + "</answer>",  # 10**100000 written out
    "<answer>1e999999</answer>",
    "<answer>NaN</answer>",
    "<answer>-0</answer>",
    "<answer>" + "1 " * 9_000 + "</answer>",
    "<answer>" + "\n".join(["1 2 3"] * 2_000) + "</answer>",
    '<answer>{"a": [1, {"b": null}]}</answer>',
]

MAX_VERIFY_SECONDS = 0.05


def _timed_verify(task, problem, response):
    # the fastest of three runs in this thread's CPU time: the bound is on the verifier, not on what else the machine
    # is doing (built-in verifiers run in this process)
    best, verdict = float("inf"), None
    for _ in range(3):
        start = time.thread_time()
        verdict = task.verify(problem, response)
        best = min(best, time.thread_time() - start)
        if best < MAX_VERIFY_SECONDS:
            break
    return verdict, best


def _assert_sane(verdict):
    assert 0.0 <= verdict.score <= 1.0
    assert verdict.correct == (verdict.score >= 1.0)
    assert isinstance(verdict.reason, str) and verdict.reason


@pytest.mark.parametrize("name", TASKS)
@FEW
@given(seed=SEEDS, level=LEVELS)
def test_reference_response_scores_one(name, seed, level):
    task = get_task(name)
    problem = task.generate(seed, level)
    reference = task.reference_response(problem)
    assert reference is not None, f"{name} has no reference solution at {level}"
    verdict = task.verify(problem, reference)
    assert verdict.score == 1.0 and verdict.correct and verdict.format_ok, verdict


@pytest.mark.parametrize("name", TASKS)
@settings(max_examples=4, deadline=None)
@given(seed=SEEDS, level=LEVELS)
def test_generation_is_deterministic(name, seed, level):
    task = get_task(name)
    assert task.generate(seed, level) == get_task(name).generate(seed, level)


def _shown(problem):
    """What a problem shows: its question and its images' pixels (a visual task may ask the same question of
    every picture)."""
    return problem.question, images_digest(problem.images)


@pytest.mark.parametrize("name", TASKS)
def test_train_and_eval_problems_mostly_differ(name):
    task = get_task(name)
    differ = sum(_shown(task.generate(s, "hard")) != _shown(task.generate(s, "hard", "eval")) for s in range(8))
    assert differ >= 6, f"{name}: only {differ}/8 seeds give different train and eval problems"


@pytest.mark.parametrize("name", TASKS)
def test_adversarial_responses_never_raise_and_are_fast(name):
    task = get_task(name)
    problem = task.generate(0, "medium")
    for response in ADVERSARIAL:
        verdict, seconds = _timed_verify(task, problem, response)
        _assert_sane(verdict)
        assert seconds < MAX_VERIFY_SECONDS, f"{name}: verify took {seconds * 1000:.0f} ms on {response[:40]!r}"


@pytest.mark.parametrize("name", TASKS)
@settings(max_examples=80, deadline=None)
@given(text=st.text(max_size=300), wrap=st.booleans())
def test_random_text_never_raises(name, text, wrap):
    task = get_task(name)
    problem = task.generate(1, "medium")
    verdict, seconds = _timed_verify(task, problem, f"<answer>{text}</answer>" if wrap else text)
    _assert_sane(verdict)
    assert seconds < MAX_VERIFY_SECONDS


@pytest.mark.parametrize("name", TASKS)
@settings(max_examples=3, deadline=None)
@given(seed=SEEDS, level=LEVELS, split=st.sampled_from(["train", "eval"]))
def test_problem_round_trips_through_dict_and_json(name, seed, level, split):
    problem = get_task(name).generate(seed, level, split)
    assert Problem.from_dict(problem.to_dict()) == problem
    assert Problem.from_dict(json.loads(json.dumps(problem.to_dict()))) == problem
