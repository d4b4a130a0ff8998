"""The held-out problems of an experiment design, pinned once: every arm and seed is scored on the same
problems (the eval split's seeds ``0..N-1`` of each task at its training difficulty), and a later rerun of the
design — another session, another commit — checks that its tasks still generate exactly those problems before
it adds a run to the design's results.

    <out>/heldout.jsonl    one line per problem: task, eval-split seed, key (task, prompt and answer digested)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from polyrl.errors import UserError
from polyrl.eval.heldout import problem_key
from polyrl.run_dir import atomic_write_text

HELDOUT_FILE = "heldout.jsonl"


def heldout_records(tasks: dict[str, tuple[Any, Any]], problems_per_task: int) -> list[dict[str, Any]]:
    """``{task, seed, key}`` of each held-out problem the runs' evaluations generate: for each task (name ->
    (task, difficulty)), eval-split seeds ``0..problems_per_task-1``, in the order the evaluation scores them."""
    return [
        {"task": name, "seed": seed, "key": problem_key(task.generate(seed, difficulty, split="eval"))}
        for name, (task, difficulty) in tasks.items()
        for seed in range(problems_per_task)
    ]


def pin_heldout(out: Path, records: list[dict[str, Any]]) -> None:
    """Write ``out/heldout.jsonl`` the first time; afterwards refuse (one line) a design whose tasks now generate
    other held-out problems than the ones its finished runs were scored on."""
    path = out / HELDOUT_FILE
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
        return
    try:
        pinned = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{path} is not readable JSON lines; restore it from the design's results") from None
    if pinned == records:
        return
    old = {(r.get("task"), r.get("seed")): r.get("key") for r in pinned if isinstance(r, dict)}
    changed = sorted({r["task"] for r in records if old.get((r["task"], r["seed"])) != r["key"]})
    if not changed:
        changed = sorted({str(t) for t, _ in old} ^ {r["task"] for r in records}) or ["(the number of problems)"]
    raise UserError(
        f"the held-out problems differ from those this design's runs were scored on ({path}): "
        f"{', '.join(changed)}; finish the design at the commit it began with, or start another --out"
    )


def read_problem_records(path: Path) -> list[dict[str, Any]]:
    """A run's ``eval/<name>.problems.jsonl``: one record per greedy answer (empty when the file is missing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
