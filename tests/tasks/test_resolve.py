"""One resolver for every task name: a registered name first, then the longest registered prefix; a training-mix
entry's dataset and harness; the answer format on the task and every task it wraps."""

import json

import pytest

from polyrl.errors import UserError
from polyrl.rollout.harness.task import HarnessSpec, HarnessTask
from polyrl.tasks import get_task, register_task_prefix, resolve_task
from polyrl.tasks.answers import AnswerFormat
from polyrl.tasks.prefixes import TASK_PREFIXES
from polyrl.tasks.task_registry import TASKS


@pytest.fixture
def prefixes(monkeypatch):
    """The prefix registry, loaded, with whatever a test registers forgotten after it."""
    TASK_PREFIXES.load()
    monkeypatch.setattr(TASK_PREFIXES, "_entries", dict(TASK_PREFIXES._entries))
    return TASK_PREFIXES


def test_every_route_is_a_registered_prefix():
    assert {"rg/", "compose/", "env/", "vf/", "harness:"} <= set(TASK_PREFIXES.names())


def test_a_registered_name_is_that_task_even_under_a_prefix():
    # compose/ routes chains built on demand; compose/mix and compose/rev are registered tasks
    assert type(get_task("compose/mix")) is TASKS["compose/mix"]
    assert type(get_task("compose/rev")) is TASKS["compose/rev"]
    assert get_task("compose/rev+sort").ops == ("rev", "sort")


def test_the_longest_registered_prefix_routes_a_name(prefixes):
    register_task_prefix("env/retry:")(lambda request: get_task("addition"))
    assert resolve_task("env/retry:countdown").name == "addition"
    assert resolve_task("env/calculator:countdown").name == "env/calculator:countdown"


def test_a_name_with_no_route_is_an_unknown_task_with_the_closest_names():
    with pytest.raises(UserError, match=r"^unknown task 'countdwn'; did you mean countdown\?$"):
        resolve_task("countdwn")


def test_a_harness_prefix_without_an_agent_is_an_unknown_task_not_endless_routing():
    # "harness:" routes entries that carry a harness option; as a bare name it used to route to itself forever
    with pytest.raises(UserError, match=r"^unknown task 'harness:addition': an agent plays a task named in its own"):
        resolve_task("harness:addition")


def test_the_answer_format_reaches_every_task_a_name_wraps():
    boxed = AnswerFormat("boxed")
    retry = resolve_task("env/retry:addition", answer_format=boxed)
    assert retry.answer_format == boxed and retry.inner.answer_format == boxed
    assert get_task("addition", answer_format="boxed").answer_format == boxed


def test_an_environment_wraps_single_turn_tasks_only():
    with pytest.raises(UserError, match=r"^environment env/retry wraps a single-turn task, not 'env/wordle'$"):
        resolve_task("env/retry:env/wordle")


def test_an_entry_with_a_harness_is_its_task_played_by_the_agent(tmp_path, monkeypatch):
    (tmp_path / "resolve_agent.py").write_text("def agent(base_url, problem):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    task = resolve_task("env/retry:addition", harness=HarnessSpec(fn="resolve_agent:agent"))
    assert isinstance(task, HarnessTask) and task.name == "env/retry:addition"
    assert task.inner.name == "env/retry:addition" and task.inner.inner.name == "addition"


def test_an_entry_with_a_dataset_registers_it_under_the_wrapped_name(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(8)))
    task = resolve_task("env/retry:resolve_rows", dataset={"path": str(rows), "eval_fraction": 0.5})
    try:
        assert task.inner.name == "resolve_rows" and get_task("resolve_rows").name == "resolve_rows"
    finally:
        TASKS.remove("resolve_rows")


def test_a_dataset_cannot_take_a_routed_name(tmp_path):
    from polyrl.tasks.dataset import load_dataset_task

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n")
    with pytest.raises(UserError, match=r"dataset task name 'rg/mine' must not start with rg/"):
        load_dataset_task("rg/mine", {"path": str(rows)})
