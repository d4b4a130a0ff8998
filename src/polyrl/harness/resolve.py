"""A training-mix entry's task, the harness kinds included (``vf/`` tasksets, entries with ``harness:``)."""

from __future__ import annotations

from polyrl.envs.registry import resolve_task_spec as resolve_plain
from polyrl.harness.task import HarnessTask
from polyrl.tasks.base import Task

__all__ = ["resolve_task_spec"]


def resolve_task_spec(spec, env_config=None, answer_format=None) -> Task:
    """The task of one training-mix entry, harness kinds included: a ``vf/`` taskset, or an entry with
    ``harness:`` (the inner task played by the user's agent); anything else as
    :func:`polyrl.envs.registry.resolve_task_spec` resolves it."""
    if spec.name.startswith("vf/"):  # a verifiers taskset, played through the harness endpoint
        from polyrl.harness.vf_tasks import VerifiersTask

        return VerifiersTask(spec.name, getattr(spec, "harness", None))
    task = resolve_plain(spec, env_config, answer_format)
    if getattr(spec, "harness", None) is not None:  # episodes played by the user's agent function
        return HarnessTask(task, spec.harness)
    return task
