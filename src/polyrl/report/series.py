"""What the report reads out of a run's RL records: finite per-step series, per-task keys, reward terms, and which
panels to leave out because their term is off.

RL records are the ``"stage": "rl"`` lines of ``metrics.jsonl``: overall statistics under ``<key>`` and per task under
``<key>/<task>``. Any key may be missing, ``null`` (a NaN written by ``RunDir.log``) or NaN on a given step; a series
keeps only the steps where the value is a finite number. Task names may themselves contain ``/`` (``rg/countdown``),
so per-task keys are recognised by the run's task list, never by splitting on the last ``/``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def value(record: dict[str, Any], key: str) -> float | None:
    """``record[key]`` as a finite float, or None (absent, null, NaN, ±inf, a string, a bool, a list)."""
    x = record.get(key)
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` over ``records``, skipping the steps where it is not a finite number."""
    pts = [(r.get("step"), value(r, key)) for r in records]
    pts = [(s, v) for s, v in pts if isinstance(s, int) and v is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def counts(records: list[dict[str, Any]], key: str, ref: str) -> tuple[list[int], list[float]]:
    """(steps, values) of a count ``key`` that is logged only on the steps where it is not 0 (an invalid proposal's
    reason): 0 on every step where ``ref`` is logged and ``key`` is not."""
    logged_at = dict(zip(*series(records, key)))
    steps = series(records, ref)[0]
    return steps, [logged_at.get(s, 0.0) for s in steps]


def logged(records: list[dict[str, Any]], key: str) -> bool:
    """Whether ``key`` has a finite value on at least one step."""
    return any(value(r, key) is not None for r in records)


def always_zero(records: list[dict[str, Any]], key: str) -> bool:
    """Whether ``key`` was logged and is exactly 0 on every step where it is finite."""
    values = [v for v in (value(r, key) for r in records) if v is not None]
    return bool(values) and all(v == 0.0 for v in values)


def task_names(listed: list[str], records: list[dict[str, Any]]) -> list[str]:
    """The config's tasks in their order, then any other task that has ``reward/<task>`` keys (an environment or a
    config that does not list its tasks)."""
    logged_tasks = sorted({k.split("/", 1)[1] for r in records for k in r if k.startswith("reward/")})
    return list(listed) + [t for t in logged_tasks if t not in listed]


def terms(records: list[dict[str, Any]], prefix: str, tasks: list[str]) -> list[str]:
    """The names ``<term>`` of the overall keys ``<prefix>/<term>`` (``reward_terms``, ``reward_failures``).

    ``<prefix>/<term>/<task>`` (the per-task form of the same statistic) is not a term of its own.
    """
    found = set()
    suffixes = tuple(f"/{t}" for t in tasks)
    for r in records:
        for key in r:
            if key.startswith(prefix + "/") and not key.endswith(suffixes):
                found.add(key[len(prefix) + 1 :])
    return sorted(found)


def kl_coef(config: dict[str, Any]) -> float | None:
    """``rl.kl_coef`` from the resolved config, or None when the config does not say."""
    rl = config.get("rl")
    x = rl.get("kl_coef") if isinstance(rl, dict) else None
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


@dataclass(frozen=True)
class Omitted:
    """A panel left out of the report, and why (said on the page so a reader knows it was not forgotten)."""

    title: str
    reason: str


def kl_is_off(config: dict[str, Any]) -> str | None:
    """Why the KL-to-reference panel is left out (``rl.kl_coef`` is 0: the trainer may still log a KL it does not
    optimise), or None to draw it."""
    return "off (rl.kl_coef = 0)" if kl_coef(config) == 0.0 else None
