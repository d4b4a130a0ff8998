"""The README's count of built-in tasks and their categories is the registry's (it said 41 when 56 were registered)."""

import re
from pathlib import Path

from polyrl.tasks.task_registry import TASKS

README = Path(__file__).parents[2] / "README.md"


def _builtin() -> dict[str, str]:
    return {n: TASKS[n].category for n in TASKS.names() if TASKS[n].__module__.startswith("polyrl.tasks.builtin.")}


def test_the_readme_counts_every_built_in_task_and_category():
    text = README.read_text()
    count, categories = re.search(r"(\d+) built-in tasks in (\w+) categories", text).groups()
    words = {"seven": 7, "eight": 8, "nine": 9, "ten": 10}
    assert (int(count), words[categories]) == (len(_builtin()), len(set(_builtin().values())))
    assert f"{count} built-ins" in text  # the Layout section says the same


def test_the_readme_splits_the_built_in_tasks_into_text_and_visual_as_registered():
    text, visual = map(int, re.search(r"built-ins \((\d+) text, (\d+) visual\)", README.read_text()).groups())
    categories = list(_builtin().values())
    assert (text, visual) == (len(categories) - categories.count("visual"), categories.count("visual"))
