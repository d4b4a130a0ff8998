"""Verifiable tasks: generators with controllable difficulty and rule-based verifiers."""

from polyrl.tasks.answers import AnswerFormat, Extraction
from polyrl.tasks.base import CATEGORIES, DifficultySpace, Example, Param, Problem, Task, Verdict
from polyrl.tasks.registry import get_task, get_task_class, list_tasks, register_task

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
    "get_task_class",
    "list_tasks",
    "register_task",
]
