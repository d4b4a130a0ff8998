"""Evaluation suites: which tasks, at which difficulties, on which eval-split seeds, with how many samples.

A suite is a YAML file validated here; it records every seed, so two evaluations of the same suite see
exactly the same problems::

    name: core
    samples: 4              # sampled completions per problem (pass@k, maj@k), besides the greedy one
    temperature: 1.0
    max_new_tokens: 32
    tasks:
      - {name: addition, difficulties: [easy, hard], n: 50}
      - {name: caesar, difficulties: [0.3], n: 20, seed_start: 1000}
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from polyrl.errors import UserError
from polyrl.tasks import get_task
from polyrl.tasks.base import Problem
from polyrl.yaml_files import describe, safe_load


class SuiteTask(BaseModel):
    """One task of a suite: problems ``seed_start … seed_start+n-1`` of the eval split at each difficulty."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Registered task name (see `polyrl tasks list`).")
    difficulties: list[float | str] = Field(["medium"], min_length=1, description="Knobs in [0, 1] or preset names.")
    n: int = Field(50, ge=1, description="Problems per difficulty.")
    seed_start: int = Field(0, ge=0, description="First eval-split seed.")


class EvalSuite(BaseModel):
    """A reproducible evaluation: tasks, difficulties, seeds, samples and decoding settings."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("suite", description="Shown in reports and result files.")
    tasks: list[SuiteTask] = Field(min_length=1, description="The tasks to evaluate.")
    samples: int = Field(
        1, ge=1, le=256, description="Sampled completions per problem for pass@k / maj@k (1: greedy only)."
    )
    temperature: float = Field(1.0, ge=0.0, le=2.0, description="Sampling temperature of the sampled completions.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling of the sampled completions.")
    max_new_tokens: int = Field(64, ge=1, description="Longest response in tokens.")
    answer_format: Literal["tags", "boxed", "last_line"] = Field("tags", description="How responses mark answers.")
    prompt_field: Literal["prompt", "question"] | None = Field(
        None,
        description="'prompt' (with the answer instruction) or 'question'; default: the run's setting, else 'prompt'.",
    )
    system: str | None = Field(None, description="Optional system message.")
    seed: int = Field(0, description="Seed of the local sampler (endpoints sample on their side).")

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, tasks: list[SuiteTask]) -> list[SuiteTask]:
        for t in tasks:
            task = get_task(t.name)  # UserError for an unknown task
            if getattr(task, "is_environment", False) or getattr(task, "is_harness", False):
                raise UserError(f"task {t.name!r} is played in episodes; polyrl eval scores single-turn tasks")
            space = task.difficulty_space()
            for d in t.difficulties:
                space.knob(d)  # UserError for a bad difficulty
        return tasks

    def fingerprint(self) -> str:
        """A short hash of everything that decides the samples: resumed results must come from the same suite."""
        return hashlib.sha256(json.dumps(self.model_dump(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class EvalItem:
    """One problem of a suite, with where it came from."""

    task: str
    category: str
    difficulty: str
    problem: Problem


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "suite"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {err['msg']}{more}"


def parse_suite(data: Any, source: str = "suite") -> EvalSuite:
    if not isinstance(data, dict):
        raise UserError(f"{source}: a suite is a YAML mapping with at least 'tasks:'")
    try:
        return EvalSuite.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"invalid suite {source}: {_one_line(exc)}") from None


def load_suite(path: str | Path) -> EvalSuite:
    """Read and validate a suite YAML file (any problem is a one-line UserError)."""
    path = Path(path)
    try:
        data = safe_load(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read suite {str(path)!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"suite {str(path)!r}: {describe(exc)}") from None
    return parse_suite(data, repr(str(path)))


def suite_from_options(tasks: str, difficulty: str, n: int, samples: int, **settings: Any) -> EvalSuite:
    """The suite that ``--tasks a,b --difficulty D --n N --samples K`` describes."""
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        raise UserError("--tasks is empty: give comma-separated task names")
    levels = [d.strip() for d in difficulty.split(",") if d.strip()]
    data = {
        "name": "cli",
        "samples": samples,
        **{k: v for k, v in settings.items() if v is not None},
        "tasks": [{"name": t, "difficulties": levels, "n": n} for t in names],
    }
    return parse_suite(data, "from --tasks")


def suite_items(suite: EvalSuite) -> list[EvalItem]:
    """Every problem of the suite, in a fixed order."""
    items = []
    for spec in suite.tasks:
        task = get_task(spec.name, answer_format=suite.answer_format)
        for level in spec.difficulties:
            for seed in range(spec.seed_start, spec.seed_start + spec.n):
                items.append(EvalItem(spec.name, task.category, str(level), task.generate(seed, level, "eval")))
    return items
