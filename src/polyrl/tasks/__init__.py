"""Verifiable tasks: generators with controllable difficulty and rule-based verifiers."""

from polyrl.tasks.answers import AnswerFormat, Extraction
from polyrl.tasks.base import CATEGORIES, DifficultySpace, Example, Param, Problem, Task, Verdict
from polyrl.tasks.prefixes import register_task_prefix
from polyrl.tasks.registry import list_tasks, register_task
from polyrl.tasks.resolve import get_task, resolve_task

__all__ = [
    "CATEGORIES",
    "AnswerFormat",
    "DifficultySpace",
    "Example",
    "Extraction",
    "Param",
    "Problem",
    "Task",
    "Verdict",
    "get_task",
    "list_tasks",
    "register_task",
    "register_task_prefix",
    "resolve_task",
]
