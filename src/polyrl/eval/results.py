"""From per-sample records to results per task, category and difficulty; Markdown tables; comparisons.

Per problem, sample 0 is the greedy completion and samples 1…K are sampled ones:

- ``accuracy``: the greedy completion is correct.
- ``pass@1`` / ``pass@K``: unbiased estimates from the K sampled completions (Chen et al. 2021, eq. 1).
- ``maj@K``: majority vote over the K extracted answers (normalized: case, surrounding and repeated
  whitespace), then the majority answer itself is verified. Samples without an answer do not vote.
- ``mean_length``: completion tokens over all samples; ``format_failure_rate``: share of all samples that
  did not follow the answer format.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from polyrl.errors import UserError
from polyrl.eval.pass_at_k import pass_at_k
from polyrl.eval.sources import plays_episodes
from polyrl.eval.suite import EvalItem
from polyrl.tasks.base import Task

_SPACE = re.compile(r"\s+")


def normalize_answer(answer: str) -> str:
    """What counts as 'the same answer' in a majority vote."""
    return _SPACE.sub(" ", answer.strip()).lower()


def majority_answer(answers: Iterable[str | None]) -> str | None:
    """The most frequent normalized answer (ties: the one seen first); returns one raw spelling of it."""
    raw: dict[str, str] = {}
    votes: Counter[str] = Counter()
    for a in answers:
        if a is None:
            continue
        norm = normalize_answer(a)
        if norm:
            raw.setdefault(norm, a)
            votes[norm] += 1
    if not votes:
        return None
    best = max(votes.values())
    return next(raw[n] for n in raw if votes[n] == best)


def problem_stats(item: EvalItem, records: list[dict[str, Any]], k: int, task: Task) -> dict[str, Any]:
    """The per-problem numbers every group metric is averaged from (``task``: the problem's task, which
    verifies the majority answer; an episode has no single answer to vote on: its maj@k is None)."""
    greedy = next(r for r in records if r["sample"] == 0)
    sampled = [r for r in records if r["sample"] > 0]
    lengths = [r["tokens"] for r in records if r.get("tokens") is not None]
    stats = {
        "correct": float(greedy["correct"]),
        "format_failures": sum(not r["format_ok"] for r in records),
        "samples": len(records),
        "length_sum": sum(lengths),
        "length_count": len(lengths),
    }
    if k > 1:
        c = sum(bool(r["correct"]) for r in sampled)
        stats["pass@1"] = c / len(sampled)
        stats[f"pass@{k}"] = pass_at_k(len(sampled), c, k)
        vote = majority_answer(r.get("answer") for r in sampled)
        stats[f"maj@{k}"] = (
            None
            if plays_episodes(task)
            else float(vote is not None and task.verify(item.problem, task.answer_format.wrap(vote)).correct)
        )
    return stats


def _summarize(rows: list[dict[str, Any]], k: int) -> dict[str, float]:
    n = len(rows)
    samples = sum(r["samples"] for r in rows)
    lengths = sum(r["length_count"] for r in rows)
    out = {
        "problems": n,
        "accuracy": sum(r["correct"] for r in rows) / n,
        "format_failure_rate": sum(r["format_failures"] for r in rows) / samples,
        "mean_length": sum(r["length_sum"] for r in rows) / lengths if lengths else None,
    }
    if k > 1:
        for key in ("pass@1", f"pass@{k}", f"maj@{k}"):
            out[key] = _mean([r[key] for r in rows])
    return out


def aggregate(
    items: list[EvalItem], records: list[dict[str, Any]], k: int, tasks: Mapping[str, Task]
) -> dict[str, Any]:
    """Results per task, category, difficulty and task@difficulty, plus ``overall`` (mean over tasks);
    ``tasks``: each item's task by name."""
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_key[r["problem_key"]].append(r)
    groups: dict[str, dict[str, list]] = {
        "tasks": defaultdict(list),
        "categories": defaultdict(list),
        "difficulties": defaultdict(list),
        "cells": defaultdict(list),
    }
    for item in items:
        recs = by_key.get(problem_key(item), [])
        if not any(r["sample"] == 0 for r in recs):
            continue  # not evaluated yet (partial results)
        stats = problem_stats(item, recs, k, tasks[item.task])
        groups["tasks"][item.task].append(stats)
        groups["categories"][item.category].append(stats)
        groups["difficulties"][item.difficulty].append(stats)
        groups["cells"][f"{item.task}@{item.difficulty}"].append(stats)
    out: dict[str, Any] = {
        name: {g: _summarize(rows, k) for g, rows in group.items()} for name, group in groups.items()
    }
    tasks = list(out["tasks"].values())
    out["overall"] = {m: _mean([t[m] for t in tasks]) for m in (tasks[0] if tasks else {})}
    if tasks:
        out["overall"]["problems"] = sum(t["problems"] for t in tasks)
    return out


def _mean(values: list[Any]) -> Any:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def problem_key(item: EvalItem) -> str:
    return f"{item.task}|{item.difficulty}|{item.problem.seed}"


# -- presentation --------------------------------------------------------------------------------------
def _cell(metric: str, value: Any) -> str:
    if value is None:
        return "–"
    if metric == "mean_length":
        return f"{value:.1f}"
    if metric == "problems":
        return str(int(value))
    return f"{100 * value:.1f}%"


def metric_names(results: Mapping[str, Any]) -> list[str]:
    k = results.get("k", 1)
    extra = ["pass@1", f"pass@{k}", f"maj@{k}"] if k > 1 else []
    return ["problems", "accuracy", *extra, "mean_length", "format_failure_rate"]


def markdown_table(rows: Mapping[str, Mapping[str, Any]], metrics: list[str], label: str) -> str:
    lines = [f"| {label} | " + " | ".join(metrics) + " |", "|---|" + "---:|" * len(metrics)]
    for name, row in rows.items():
        lines.append(f"| {name} | " + " | ".join(_cell(m, row.get(m)) for m in metrics) + " |")
    return "\n".join(lines)


def results_markdown(results: Mapping[str, Any]) -> str:
    metrics = metric_names(results)
    overall = {"**overall** (mean over tasks)": results["overall"]}
    parts = [
        f"# Evaluation: {results['suite']}",
        "",
        f"model: `{results['model']}`  ·  samples per problem: greedy + {results['k'] if results['k'] > 1 else 0}"
        f"  ·  problems: {results['problems_done']}/{results['problems_total']}",
        "",
        "## Per task",
        "",
        markdown_table({**results["tasks"], **overall}, metrics, "task"),
        "",
        "## Per category",
        "",
        markdown_table(results["categories"], metrics, "category"),
        "",
        "## Per difficulty",
        "",
        markdown_table(results["difficulties"], metrics, "difficulty"),
    ]
    if len(results["cells"]) > len(results["tasks"]):
        parts += ["", "## Per task and difficulty", "", markdown_table(results["cells"], metrics, "task@difficulty")]
    return "\n".join(parts) + "\n"


def load_results(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read results {str(path)!r}: {exc.strerror}") from None
    except ValueError:
        raise UserError(f"{str(path)!r} is not a JSON results file") from None
    if not isinstance(data, dict) or "tasks" not in data or "overall" not in data:
        raise UserError(f"{str(path)!r} is not a `polyrl eval` results file (no 'tasks'/'overall')")
    return data


def compare_table(results: Mapping[str, Mapping[str, Any]], metric: str = "accuracy") -> str:
    """A Markdown table of ``metric`` per task side by side; Δ columns are in points against the first."""
    names = list(results)
    first = results[names[0]]
    if metric not in first["overall"]:
        known = ", ".join(m for m in first["overall"] if m != "problems")
        raise UserError(f"metric {metric!r} is not in {names[0]}; known: {known}")
    header = [names[0]] + [c for n in names[1:] for c in (n, "Δ")]
    lines = ["| task | " + " | ".join(header) + " |", "|---|" + "---:|" * len(header)]
    tasks = list(dict.fromkeys(t for r in results.values() for t in r["tasks"]))
    for task in [*tasks, "overall"]:
        rows = [r["overall"] if task == "overall" else r["tasks"].get(task) for r in results.values()]
        values = [row.get(metric) if row else None for row in rows]
        cells = [_cell(metric, values[0])]
        for v in values[1:]:
            delta = "–" if v is None or values[0] is None else _delta(metric, v - values[0])
            cells += [_cell(metric, v), delta]
        lines.append(f"| {'**overall**' if task == 'overall' else task} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _delta(metric: str, d: float) -> str:
    return f"{d:+.1f}" if metric == "mean_length" else f"{100 * d:+.1f}"
