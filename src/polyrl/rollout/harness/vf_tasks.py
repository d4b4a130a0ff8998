"""verifiers tasksets as polyrl tasks (``polyrl[verifiers]``): ``tasks: [{name: "vf/mymod:MyTaskset"}]``.

``vf/<module>:<attr>`` names a ``verifiers.v1`` Taskset class (built with its default config) or a function
returning a Taskset. Each of its tasks is a problem; an episode is played through the harness endpoint
(:mod:`polyrl.rollout.harness`) by :func:`play`: the task's system prompt and prompt go to the policy as one chat
request, the reply becomes a verifiers ``Trace``, and the task's own ``@vf.reward`` functions score it. The
episode's reward is the trace's weighted sum; each function's score (and each ``@vf.metric``) is logged as
the reward term ``harness/<name>``; an episode counts as correct (``accuracy``) when the reward functions of
the largest weight all scored 1. A taskset has no held-out split: problem ``k`` of either split is task
``k mod len(taskset)``. Taskset toolsets (MCP servers) and verifiers' own harness programs are not run.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

from polyrl.errors import UserError
from polyrl.rollout.harness.http import MODEL_NAME
from polyrl.rollout.harness.outcome import Outcome
from polyrl.rollout.harness.task import HarnessSpec, HarnessTask
from polyrl.tasks.base import DEFAULT_DIFFICULTY, Difficulty, Problem, Task
from polyrl.tasks.prefixes import TaskRequest, register_task_prefix

VF_PREFIX = "vf/"


def _import_vf():
    try:
        import verifiers.v1 as vf
    except ImportError:
        raise UserError("vf/ tasks need the verifiers package: pip install 'polyrl[verifiers]'") from None
    return vf


def load_taskset(path: str):
    """The Taskset ``module:attr`` names: a Taskset class (default config), a function returning one, or one."""
    vf = _import_vf()
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"task {VF_PREFIX}{path!r} must be written '{VF_PREFIX}package.module:Taskset'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise UserError(
            f"task {VF_PREFIX}{path!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})"
        ) from None
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UserError(f"task {VF_PREFIX}{path!r}: module {module_name!r} has no attribute {attr!r}")
    try:
        if isinstance(obj, type) and issubclass(obj, vf.Taskset):
            obj = obj(_config_type(obj)())
        elif callable(obj) and not isinstance(obj, (type, vf.Taskset)):
            obj = obj()
    except Exception as exc:  # the taskset's own config or loader failed
        raise UserError(f"task {VF_PREFIX}{path!r}: cannot build the taskset ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, vf.Taskset):
        raise UserError(f"task {VF_PREFIX}{path!r} is not a verifiers Taskset (got {type(obj).__name__})")
    return obj


def _config_type(cls) -> type:
    """The TasksetConfig class a Taskset subclass declares (``Taskset[MyTask, MyConfig]``)."""
    from verifiers.v1.configs.taskset import TasksetConfig

    for base in getattr(cls, "__orig_bases__", ()):
        for arg in getattr(base, "__args__", ()):
            if isinstance(arg, type) and issubclass(arg, TasksetConfig):
                return arg
    return TasksetConfig


class TasksetProblems(Task):
    """The problems of a verifiers taskset: problem ``k`` is task ``k mod n``, its answer the index."""

    category = "verifiers"
    pure = True

    def __init__(self, name: str, taskset):
        super().__init__()
        self.name = name
        self.tasks = list(taskset.take(10_000) if not taskset.bounded else taskset)
        if not self.tasks:
            raise UserError(f"task {name!r}: the taskset yields no tasks")
        for task in self.tasks:
            task.hooks = _awaitable_hooks(task.hooks)
        self.description = f"verifiers taskset {type(taskset).__name__} ({len(self.tasks)} tasks)"

    def generate(self, seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, split: str = "train") -> Problem:
        index = int(seed) % len(self.tasks)
        text = self.tasks[index].data.prompt_text
        return Problem(self.name, text, text, index, None, int(seed), split, None, {})

    def reference_response(self, problem: Problem) -> str | None:
        return None


class VerifiersTask(HarnessTask):
    """A verifiers taskset played through the harness endpoint, scored by its own reward functions."""

    def __init__(self, name: str, spec: HarnessSpec | None = None):
        self.problems = TasksetProblems(name, load_taskset(name[len(VF_PREFIX) :]))
        super().__init__(
            self.problems, spec or HarnessSpec(fn="polyrl.rollout.harness.vf_tasks:play"), agent=self.play_task
        )

    async def play_task(self, client, problem: Problem) -> Outcome:
        """One chat request with the task's prompt, scored by the task's ``@vf.reward`` functions."""
        task = self.problems.tasks[problem.answer]
        messages = _prompt_messages(task.data)
        reply = await client.chat.completions.create(model=MODEL_NAME, messages=messages)
        trace = scored_trace(task, messages, reply.choices[0].message.content or "")
        await task.score(trace)
        scored = {k: r for k, r in trace.rewards.items() if r is not None}
        metrics = {k: float(v) for k, v in trace.metrics.items() if v is not None}
        top = max((r.weight for r in scored.values()), default=0.0)
        correct = bool(scored) and all(r.score >= 1.0 for r in scored.values() if r.weight == top)
        return Outcome(float(trace.reward), correct, {**metrics, **{k: r.score for k, r in scored.items()}})


def _awaitable_hooks(hooks):
    """A task's ``hooks`` (its ``@vf.reward``/``@vf.metric`` functions) with each plain ``def`` made a coroutine
    function: verifiers awaits them all (``asyncio.gather``), and a plain one failed every episode with its
    ``TypeError: An asyncio.Future, a coroutine or an awaitable is required``."""
    return lambda attr: [_awaitable(fn) for fn in hooks(attr)]


def _awaitable(fn):
    if inspect.iscoroutinefunction(fn):
        return fn

    @functools.wraps(fn)  # keeps its name, signature (verifiers passes what it names) and weight
    async def call(*args, **kwargs):
        result = fn(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    return call


def _prompt_messages(data) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        return [*messages, {"role": "user", "content": data.prompt}]
    return [*messages, *(m.model_dump(exclude_none=True) for m in data.prompt or [])]


def scored_trace(task, messages: list[dict[str, Any]], reply: str):
    """A verifiers Trace of the conversation ``messages`` + the sampled ``reply``, ready for ``task.score``."""
    vf = _import_vf()
    kinds = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}
    trace = vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig()),
    )
    for m in messages:
        parent = len(trace.nodes) - 1 if trace.nodes else None
        trace.nodes.append(vf.MessageNode(parent=parent, message=kinds[m["role"]](content=m["content"])))
    parent = len(trace.nodes) - 1 if trace.nodes else None
    trace.nodes.append(vf.MessageNode(parent=parent, message=vf.AssistantMessage(content=reply), sampled=True))
    trace.is_completed = trace.ok = True
    return trace


@register_task_prefix(VF_PREFIX, plays_harness=True)
def _taskset_by_name(request: TaskRequest) -> VerifiersTask:
    """``vf/<module>:<taskset>``: the taskset, played through the harness endpoint (with the entry's harness
    settings, if it has any)."""
    return VerifiersTask(request.name, request.harness)
