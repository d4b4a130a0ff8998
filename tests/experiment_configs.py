"""The CI-sized configs of the ``polyrl experiment`` tests (importable as ``experiment_configs``: ``tests/`` is on the
path): the tiny model on question prompts, one thread, no TensorBoard, SFT batches of 16, RL steps of 4 prompts × 4
completions, pass@1 evaluation; each test names its tasks and step counts."""

from pathlib import Path

import yaml


def ci_config(tasks: list[dict], sft_steps: int, rl: dict, eval: dict, **sections) -> str:
    """The YAML of a CI-sized experiment config over ``tasks``: ``rl`` and ``eval`` add to (or change) the shared
    settings of those sections; ``sections`` are further top-level sections (``strategies``, ``difficulty_control``)."""
    config = {
        "model": {"path": "tiny"},
        "prompt": {"field": "question"},
        "threads": 1,
        "tensorboard": False,
        "tasks": tasks,
        "sft": {"steps": sft_steps, "batch_size": 16},
        "rl": {"prompts_per_step": 4, "group_size": 4, **rl},
        "eval": {"pass_k": 1, **eval},
        **sections,
    }
    return yaml.safe_dump(config, sort_keys=False)


CATEGORY_TASKS = ["sort_digits", "reverse_letters", "boolean_evaluation", "addition"]
"""Two sequential tasks, a logic one and an arithmetic one: the tasks of the transfer and specialists designs."""


def category_smoke(rl_steps: int) -> str:
    """The CI size of the transfer and specialists designs: :data:`CATEGORY_TASKS` at difficulty 0, 10 SFT steps,
    ``rl_steps`` RL steps of 16 new tokens without dynamic sampling, 4 problems a task in evaluation."""
    return ci_config(
        [{"name": name, "difficulty": 0.0} for name in CATEGORY_TASKS],
        sft_steps=10,
        rl={"steps": rl_steps, "max_new_tokens": 16, "dynamic_sampling": False},
        eval={"problems_per_task": 4},
    )


def config_file(path: Path, text: str) -> Path:
    """``text`` written to ``path``; returns ``path``."""
    path.write_text(text)
    return path
