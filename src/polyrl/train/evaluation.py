"""Held-out evaluation of the run's policy: ``eval`` records in the metrics, ``eval/<name>.json`` on disk."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from polyrl.eval import evaluate_policy


def held_out(
    parts, name: str, log: Callable[[dict], None] | None, before: Callable[[], None]
) -> dict[str, dict[str, float]]:
    """Held-out results ``name`` of ``parts``' policy: computed (``before()`` first: the live display stops
    and the backend gets the current weights), or read back (the after-SFT evaluation is done once per run);
    given to ``log`` as the ``eval`` record's values unless it is None (the record is already in the metrics).
    Beside ``eval/<name>.json`` the run keeps each greedy answer's verdict, ``eval/<name>.problems.jsonl``
    (:func:`~polyrl.eval.heldout.problem_record`), for comparisons paired by problem."""
    config, run_dir = parts.config, parts.run_dir
    path = run_dir.eval_file(name)
    if path.exists() and name == "after_sft":
        results = json.loads(path.read_text())
    else:
        before()
        records: list[dict] = []
        results = evaluate(config, parts.backend, parts.prompts, parts.mix.eval_tasks(), per_problem=records)
        run_dir.save_lines(problems_file(path), records)
        run_dir.save_json(path, results)
    if log is not None:
        log({"name": name, **{f"{m}/{t}": v for t, row in results.items() for m, v in row.items()}})
    return results


def problems_file(results: Path) -> Path:
    """``eval/<name>.problems.jsonl`` beside ``eval/<name>.json``: one line per greedy answer."""
    return results.with_suffix(".problems.jsonl")


def evaluate(
    config,
    backend,
    prompts,
    tasks: dict,
    problems_per_task: int | None = None,
    pass_k: int | None = None,
    per_problem: list[dict] | None = None,
) -> dict[str, dict[str, float]]:
    """:func:`~polyrl.eval.evaluate_policy` of ``tasks`` with every setting from ``config`` (a ``TrainConfig``: its
    ``eval``, ``rl`` and ``env`` sections and the run seed); ``problems_per_task`` and ``pass_k`` replace the
    config's (an experiment's own held-out split, greedy only); ``per_problem`` receives each greedy answer's
    record."""
    cfg = config.eval
    return evaluate_policy(
        backend,
        prompts,
        tasks,
        problems_per_task or cfg.problems_per_task,
        cfg.max_new_tokens or config.rl.max_new_tokens,
        pass_k=pass_k or cfg.pass_k,
        temperature=cfg.temperature,
        seed=config.seed,
        max_episode_tokens=config.env.max_episode_tokens,
        attempts=cfg.attempts,
        env_concurrency=config.env.concurrency,
        per_problem=per_problem,
    )
