"""Evaluation suites: which tasks, at which difficulties, on which eval-split seeds, with how many samples.

A suite is a YAML file validated here; it records every seed, so two evaluations of the same suite see
exactly the same problems. Task names resolve as a training mix's do (:class:`SuiteTasks`): registered
tasks, ``env/...`` environments, ``vf/...`` tasksets, and a training config's datasets and ``harness:``
entries::

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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from polyrl.envs.env_registry import EnvConfig
from polyrl.errors import UserError
from polyrl.forward.logprobs import DEFAULT_TEMPERATURE
from polyrl.policy.generation import DEFAULT_TOP_P
from polyrl.tasks import resolve_task
from polyrl.tasks.answers import DEFAULT_ANSWER_STYLE, AnswerFormat
from polyrl.tasks.base import Problem, Task
from polyrl.yaml_files import read_yaml


@dataclass(frozen=True)
class _Entry:
    """A training-mix entry that is a name alone (a suite task the training config does not list)."""

    name: str
    harness: Any = None
    dataset: Any = None


class SuiteTasks:
    """The task each suite name stands for, resolved as training resolves its mix (``train/build.py``,
    ``_resolve_tasks``): registered tasks, ``env/...`` environments, ``vf/...`` tasksets and, from a training
    config, its entries' datasets and ``harness:`` agents, with its ``env`` settings. Each (name, answer
    format) is resolved once (a taskset is loaded, an agent imported, once per evaluation)."""

    def __init__(self, entries: Mapping[str, Any] | None = None, env_config: EnvConfig | None = None):
        self.entries = dict(entries or {})
        """Task name → the training config's mix entry of that name (a ``TaskSpec``)."""
        self.env_config = env_config
        """The training config's ``env`` section: environments' turns, tool time-outs, episode token budget."""
        self._resolved: dict[tuple[str, str], Task] = {}

    def __call__(self, name: str, answer_format: str = DEFAULT_ANSWER_STYLE) -> Task:
        key = (name, answer_format)
        if key not in self._resolved:
            entry = self.entries.get(name, _Entry(name))
            self._resolved[key] = resolve_task(
                entry.name,
                answer_format=AnswerFormat(answer_format),
                env=self.env_config,
                harness=entry.harness,
                dataset=entry.dataset,
            )
        return self._resolved[key]


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
    temperature: float = Field(
        DEFAULT_TEMPERATURE, ge=0.0, le=2.0, description="Sampling temperature of the sampled completions."
    )
    top_p: float = Field(DEFAULT_TOP_P, gt=0.0, le=1.0, description="Nucleus sampling of the sampled completions.")
    max_new_tokens: int = Field(64, ge=1, description="Longest response in tokens.")
    answer_format: Literal["tags", "boxed", "last_line"] = Field(
        DEFAULT_ANSWER_STYLE, description="How responses mark answers."
    )
    prompt_field: Literal["prompt", "question"] | None = Field(
        None,
        description="'prompt' (with the answer instruction) or 'question'; default: the run's setting, else 'prompt'.",
    )
    system: str | None = Field(None, description="Optional system message.")
    seed: int = Field(0, description="Seed of the local sampler (endpoints sample on their side).")

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, tasks: list[SuiteTask], info: ValidationInfo) -> list[SuiteTask]:
        resolve = (info.context or {}).get("tasks") or SuiteTasks()
        for t in tasks:
            space = resolve(t.name).difficulty_space()  # UserError for an unknown task
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


def parse_suite(data: Any, source: str = "suite", tasks: SuiteTasks | None = None) -> EvalSuite:
    """The suite ``data`` describes, its task names resolved by ``tasks`` (default: no training config)."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: a suite is a YAML mapping with at least 'tasks:'")
    try:
        return EvalSuite.model_validate(data, context={"tasks": tasks})
    except ValidationError as exc:
        raise UserError(f"invalid suite {source}: {_one_line(exc)}") from None


def load_suite(
    path: str | Path, overrides: Mapping[str, Any] | None = None, tasks: SuiteTasks | None = None
) -> EvalSuite:
    """Read and validate a suite YAML file, with ``overrides`` of its fields (any problem is a one-line
    UserError)."""
    path = Path(path)
    data = read_yaml(path, "suite")
    if overrides and isinstance(data, dict):
        data = {**data, **overrides}
    return parse_suite(data, repr(str(path)), tasks)


def suite_from_options(
    names: str, difficulty: str, n: int | None, samples: int | None, tasks: SuiteTasks | None = None, **settings: Any
) -> EvalSuite:
    """The suite that ``--tasks a,b --difficulty D --n N --samples K`` describes (a setting that is None: the
    suite's default); ``tasks`` resolves the names as training does."""
    names = [t.strip() for t in names.split(",") if t.strip()]
    if not names:
        raise UserError("--tasks is empty: give comma-separated task names")
    levels = [d.strip() for d in difficulty.split(",") if d.strip()]
    given = {"samples": samples, **settings}
    data = {
        "name": "cli",
        **{k: v for k, v in given.items() if v is not None},
        "tasks": [{"name": t, "difficulties": levels, **({} if n is None else {"n": n})} for t in names],
    }
    return parse_suite(data, "from --tasks", tasks)


def suite_items(suite: EvalSuite, tasks: SuiteTasks | None = None) -> list[EvalItem]:
    """Every problem of the suite, in a fixed order."""
    resolve = tasks or SuiteTasks()
    items = []
    for spec in suite.tasks:
        task = resolve(spec.name, suite.answer_format)
        for level in spec.difficulties:
            for seed in range(spec.seed_start, spec.seed_start + spec.n):
                items.append(EvalItem(spec.name, task.category, str(level), task.generate(seed, level, "eval")))
    return items
