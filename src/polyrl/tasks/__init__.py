"""Verifiable tasks: generators with controllable difficulty and rule-based verifiers."""

from polyrl.tasks.answers import AnswerFormat, Extraction
from polyrl.tasks.base import (
    CATEGORIES,
    TEXT_AND_IMAGES,
    TEXT_ONLY,
    DifficultySpace,
    Example,
    Param,
    Problem,
    Task,
    Verdict,
    check_modalities,
)
from polyrl.tasks.prefixes import register_task_prefix
from polyrl.tasks.resolve import get_task, resolve_task
from polyrl.tasks.task_registry import list_tasks, register_task

__all__ = [
    "CATEGORIES",
    "TEXT_AND_IMAGES",
    "TEXT_ONLY",
    "AnswerFormat",
    "DifficultySpace",
    "Example",
    "Extraction",
    "Param",
    "Problem",
    "Task",
    "Verdict",
    "check_modalities",
    "get_task",
    "list_tasks",
    "register_task",
    "register_task_prefix",
    "resolve_task",
]
