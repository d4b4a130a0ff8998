"""Before a long comparison: how many runs are left and roughly how long they will take on this machine.

Seconds per step come from what this experiment already recorded — finished runs' ``wall_time.json``
(training and evals, divided by the run's steps), else the ``step_time`` of the steps logged so far — or, when
nothing is recorded yet, from a quick timing of a few SFT and RL steps in a temporary directory (training only:
evals come on top).
"""

from __future__ import annotations

import json
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from polyrl.experiments.curriculum import WALL_TIME_FILE, refuse_pruned, run_finished

PROBE_STEPS = 3
"""Steps per stage of the quick timing run."""


@dataclass
class Budget:
    sft_runs: int
    """SFT warm starts still to train."""
    rl_runs: int
    """(arm, seed) runs still to train."""
    finished: int
    """(arm, seed) runs already finished (skipped)."""
    sft_steps: int
    rl_steps: int
    s_per_sft_step: float
    s_per_rl_step: float
    source: str
    """Where the seconds per step come from."""
    seeds_left: int = 1
    """Seeds with a run still to train (what ``--jobs`` can spread over processes)."""
    rl_total_steps: int | None = None
    """RL steps of the runs left, over all arms, when arms set their own ``rl.steps`` (``rl_steps`` is then
    the first arm's); None: ``rl_runs × rl_steps``."""

    @property
    def rl_steps_left(self) -> int:
        return self.rl_total_steps if self.rl_total_steps is not None else self.rl_runs * self.rl_steps

    @property
    def seconds(self) -> float:
        return self.sft_runs * self.sft_steps * self.s_per_sft_step + self.rl_steps_left * self.s_per_rl_step


def _recorded(runs: list[Path], stage: str, steps: int) -> tuple[float | None, str]:
    """Seconds per step of ``stage`` recorded in ``runs``: whole-run wall time per step when a run finished
    with one, else the median logged ``step_time``."""
    walls = [
        json.loads((r / WALL_TIME_FILE).read_text())["wall_s"] / steps for r in runs if (r / WALL_TIME_FILE).exists()
    ]
    if walls:
        return statistics.mean(walls), "recorded wall time of finished runs (with evals)"
    times = []
    for r in runs:
        path = r / "metrics.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if rec.get("stage") == stage and isinstance(rec.get("step_time"), (int, float)):
                    times.append(rec["step_time"])
    if times:
        return statistics.median(times), "logged step times of this experiment (training only, evals on top)"
    return None, ""


def probe_step_times(plan, steps: int = PROBE_STEPS, strategy=None) -> tuple[float, float]:
    """Seconds per SFT step and per RL step of seed 0's config of ``strategy`` (default: the first arm), timed
    over ``steps`` steps each in a temporary run directory (median of the logged ``step_time``)."""
    from polyrl.train.config import load_config
    from polyrl.train.trainer import Trainer

    strategy = strategy or plan.strategies[0]
    with tempfile.TemporaryDirectory() as tmp:
        data = plan.config(strategy, 0).model_dump(mode="json")
        data.update(run_dir=tmp, checkpoint_every=10**6)
        data["sft"]["steps"], data["rl"]["steps"] = steps, steps
        data["eval"].update(problems_per_task=1, every=0)
        Trainer(load_config(None, base=data)).run()
        records = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    per = {
        stage: statistics.median(r["step_time"] for r in records if r.get("stage") == stage) for stage in ("sft", "rl")
    }
    return per["sft"], per["rl"]


def estimate_budget(plan, probe: bool = True) -> Budget:
    """The runs still to train (finished ones are skipped) and the wall time they need at the recorded or
    probed seconds per step. Arms may differ in cost (multi-turn episodes take longer): each arm's RL runs
    are timed by its own records, else (``probe``) by a quick timing of that arm, else by the other arms'
    records; the budget's seconds per RL step is the average over the runs left."""
    refuse_pruned(plan)  # an arm left to train whose warm start was pruned cannot be trained: say so first
    sft_dirs = list(dict.fromkeys(plan.sft_dir(s) for s in plan.seeds))
    arm_dirs = {a.name: [plan.run_dir(a.name, s) for s in plan.seeds] for a in plan.strategies}
    rl_dirs = [d for dirs in arm_dirs.values() for d in dirs]
    sft_steps = plan.config(None, 0).sft.steps
    arm_steps = {a.name: plan.config(a, 0).rl.steps for a in plan.strategies}
    rl_steps = arm_steps[plan.strategies[0].name]
    sft_s, src_sft = _recorded(sft_dirs, "sft", sft_steps)
    recorded = {name: _recorded(dirs, "rl", arm_steps[name]) for name, dirs in arm_dirs.items()}
    per_arm = {name: r[0] for name, r in recorded.items()}
    known = [v for v in per_arm.values() if v is not None]
    pooled = statistics.mean(known) if known else None
    src_rl = next((r[1] for r in recorded.values() if r[1]), "")
    source = "; ".join(dict.fromkeys(s for s in (src_sft, src_rl) if s))
    unknown = [a for a in plan.strategies if per_arm[a.name] is None]
    if (sft_s is None or unknown) and probe:
        for arm in unknown or plan.strategies[:1]:
            probed = probe_step_times(plan, strategy=arm)
            sft_s = sft_s if sft_s is not None else probed[0]
            per_arm[arm.name] = per_arm[arm.name] if per_arm[arm.name] is not None else probed[1]
        source = "; ".join(s for s in (source, f"a quick timing of {PROBE_STEPS} steps per stage (evals on top)") if s)
    per_arm = {name: v if v is not None else pooled for name, v in per_arm.items()}
    finished = {d: run_finished(plan, d) for d in rl_dirs}
    left = {name: sum(not finished[d] for d in dirs) for name, dirs in arm_dirs.items()}
    rl_runs = sum(left.values())
    total_steps = sum(left[n] * arm_steps[n] for n in left)
    if any(v is None for v in per_arm.values()):
        rl_s = None
    elif total_steps:
        rl_s = sum(left[n] * arm_steps[n] * per_arm[n] for n in left) / total_steps
    else:
        rl_s = sum(per_arm.values()) / len(per_arm)
    return Budget(
        sft_runs=sum(not (d / "eval" / "after_sft.json").exists() for d in sft_dirs),
        rl_runs=rl_runs,
        finished=len(rl_dirs) - rl_runs,
        sft_steps=sft_steps,
        rl_steps=rl_steps,
        s_per_sft_step=sft_s if sft_s is not None else float("nan"),
        s_per_rl_step=rl_s if rl_s is not None else float("nan"),
        source=source or "nothing recorded",
        seeds_left=sum(any(not finished[plan.run_dir(a.name, s)] for a in plan.strategies) for s in plan.seeds),
        rl_total_steps=total_steps if len(set(arm_steps.values())) > 1 else None,
    )


def format_budget(b: Budget, jobs: int = 1) -> str:
    """One line; with ``jobs > 1`` (seeds in parallel processes) also the wall time if that many cores are free:
    the serial time divided by the parallel seeds, rounded up to whole seeds per process."""
    rl = (
        f"{b.rl_runs} RL run(s) × {b.rl_steps} steps"
        if b.rl_total_steps is None
        else f"{b.rl_runs} RL run(s) of {b.rl_total_steps} steps in all"
    )
    if b.s_per_sft_step != b.s_per_sft_step or b.s_per_rl_step != b.s_per_rl_step:
        return (
            f"budget: {b.sft_runs} SFT run(s) × {b.sft_steps} steps + {rl} "
            f"({b.finished} finished run(s) skipped); no timing recorded yet (--budget times a few steps)"
        )
    line = (
        f"budget: {b.sft_runs} SFT run(s) × {b.sft_steps} steps at {b.s_per_sft_step:.2f} s/step + "
        f"{rl} at {b.s_per_rl_step:.2f} s/step "
        f"({b.finished} finished run(s) skipped) ≈ {b.seconds / 60:.0f} min on this machine [{b.source}]"
    )
    if jobs > 1 and b.seeds_left > 1:
        workers = min(jobs, b.seeds_left)
        rounds = -(-b.seeds_left // workers)
        line += f"; with --jobs {jobs}: ≈ {b.seconds * rounds / b.seeds_left / 60:.0f} min if {workers} cores are free"
    return line
