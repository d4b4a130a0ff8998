"""The curriculum comparison: the same budget trained with several task samplers, over several seeds.

Every strategy starts RL from the same SFT warm start of its seed (one SFT run per seed, or one for all
seeds with ``share_sft``, copied into each strategy's run directory and resumed), so the comparison
isolates what the curriculum does during RL.
The final policy of each run is evaluated on two held-out splits: *easy* (each task's training
difficulty) and *hard* (each task's ``eval_difficulty``, or ``hard_difficulty`` where none is given).

    out/runs/sft/seed<k>/          the shared warm start
    out/runs/<strategy>/seed<k>/   a full run directory (metrics.jsonl, eval/after_rl.json, eval/hard.json)
    out/report.md, out/*.png, out/results.json
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyrl.curriculum import SAMPLERS, make_difficulty_controller, make_sampler
from polyrl.envs.env_registry import EnvConfig
from polyrl.envs.retry import retried_task_name
from polyrl.errors import UserError
from polyrl.tasks import resolve_task
from polyrl.train.config import TrainConfig, load_config, save_config
from polyrl.yaml_files import read_yaml

DIFFICULTY_SUFFIX = "+difficulty"


@dataclass
class Strategy:
    """A named curriculum: config sections merged over the experiment's base config."""

    name: str
    overrides: dict[str, Any]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def parse_strategies(names: list[str], defined: dict[str, Any]) -> list[Strategy]:
    """Strategies by name: one defined under ``strategies:`` in the experiment file, a registered sampler
    name (its default options), or ``<sampler>+difficulty`` (that sampler plus the difficulty controller)."""
    if not names:
        raise UserError("no samplers to compare")
    out = []
    for name in names:
        if name in defined:
            if not isinstance(defined[name], dict):
                raise UserError(f"strategy {name!r} must be a mapping of config sections")
            out.append(Strategy(name, defined[name]))
            continue
        sampler, control = (
            (name[: -len(DIFFICULTY_SUFFIX)], True) if name.endswith(DIFFICULTY_SUFFIX) else (name, False)
        )
        if sampler not in SAMPLERS:
            known = ", ".join(sorted(set(SAMPLERS) | set(defined)))
            raise UserError(
                f"unknown sampler or strategy {name!r}; known: {known} (append {DIFFICULTY_SUFFIX} for difficulty control)"
            )
        over: dict[str, Any] = {"sampler": {"name": sampler}}
        if control:
            over["difficulty_control"] = {"enabled": True}
        out.append(Strategy(name, over))
    if len({s.name for s in out}) != len(out):
        raise UserError("a strategy is listed twice")
    return out


@dataclass
class ExperimentPlan:
    base: dict[str, Any]
    strategies: list[Strategy]
    seeds: list[int]
    hard: dict[str, Any]
    """Each task's hard-split difficulty; empty when the comparison has no hard split."""
    out: Path
    share_sft: bool = False
    """One SFT warm start (seed 0) for every seed: seeds then differ only in RL."""
    prune_checkpoints: bool = False
    """Delete a finished arm run's checkpoints (the optimizer states; its final model and evals stay) and its
    copy of the warm start's ``sft_model``: on a real model ~1.6 GB and ~0.5 GB per run, and a finished run is
    never resumed. A seed's SFT run keeps its checkpoint until every arm of the seed has finished (arms start
    from it), then loses it too (its ``sft_model`` and evals stay; with ``share_sft`` it is kept: later seeds
    start from it)."""

    def sft_dir(self, seed: int) -> Path:
        return self.out / "runs" / "sft" / f"seed{0 if self.share_sft else seed}"

    def run_dir(self, strategy: str, seed: int) -> Path:
        return self.out / "runs" / strategy / f"seed{seed}"

    def config(self, strategy: Strategy | None, seed: int) -> TrainConfig:
        over = strategy.overrides if strategy is not None else {"rl": {"enabled": False}}
        path = self.run_dir(strategy.name, seed) if strategy is not None else self.sft_dir(seed)
        data = _merge(self.base, {**over, "seed": seed, "run_dir": str(path), "progress": False})
        return load_config(None, base=data)


def _read_mapping(path: Path, what: str) -> dict[str, Any]:
    raw = read_yaml(path, what) or {}
    if not isinstance(raw, dict):
        raise UserError(f"{what} {str(path)!r} must be a mapping of fields")
    return raw


def read_experiment_config(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """An experiment file: a training config plus an optional ``strategies:`` mapping; returns both. With
    ``base: <training config>`` (a path relative to the experiment file) the file's other fields override
    that config's, so an experiment runs a job's recipe without copying it."""
    path = Path(path)
    raw = _read_mapping(path, "experiment config")
    base = raw.pop("base", None)
    if base is not None:
        if not isinstance(base, str):
            raise UserError(f"experiment config {str(path)!r}: base must be the path of a training config")
        base_path = path.parent / base
        base_raw = _read_mapping(base_path, "base config")
        if "strategies" in base_raw or "base" in base_raw:
            raise UserError(f"base config {str(base_path)!r} is a training config: no strategies: or base: in it")
        raw = _merge(base_raw, raw)
    return raw, raw.pop("strategies", None) or {}


def plan_experiment(
    config_path: str | Path,
    seeds: int,
    samplers: list[str] | None,
    out: str | Path,
    hard_difficulty: float | None = 0.5,
    share_sft: bool = False,
    strategies: dict[str, Any] | None = None,
) -> ExperimentPlan:
    """Read and check everything before any training: the base config, each strategy's config per seed,
    its sampler and difficulty controller, and the hard split. With ``hard_difficulty=None`` only tasks with
    an ``eval_difficulty`` define a hard split; when none has one, there is no hard split. ``strategies``
    (name -> config sections), when given, are the arms instead of the file's ``strategies:``."""

    if seeds < 1:
        raise UserError(f"--seeds must be at least 1, got {seeds}")
    raw, defined = read_experiment_config(config_path)
    if strategies is not None:
        defined = strategies
    base = load_config(None, base=raw).model_dump(mode="json")
    if not isinstance(defined, dict):
        raise UserError("strategies must be a mapping name -> config sections")
    names = samplers if samplers else (list(defined) or ["uniform", "learning_progress", "success_band+difficulty"])
    strategies = parse_strategies(names, defined)
    hard, tasks = {}, {}
    has_hard = hard_difficulty is not None or any(spec["eval_difficulty"] is not None for spec in base["tasks"])
    for spec in base["tasks"]:
        name = spec["name"]
        tasks[name] = resolve_task(name, env=EnvConfig(**base["env"]))
        if has_hard:
            hard[name] = spec["eval_difficulty"] if spec["eval_difficulty"] is not None else hard_difficulty
            if hard[name] is None:
                raise UserError(f"task {name!r} needs an eval_difficulty (the other tasks define a hard split)")
            tasks[name].difficulty_space().resolve(hard[name])
        spec["eval_difficulty"] = spec["difficulty"]  # the Trainer's own evals are the easy split
    plan = ExperimentPlan(base, strategies, list(range(seeds)), hard, Path(out), share_sft)
    for strategy in [None, *strategies]:
        for seed in plan.seeds:
            cfg = plan.config(strategy, seed)
            # a strategy may set its own tasks:
            mix = {s.name: tasks[s.name] if s.name in tasks else resolve_task(s.name, env=cfg.env) for s in cfg.tasks}
            make_sampler(cfg.sampler.name, list(mix), cfg.sampler.options)
            make_difficulty_controller(cfg.difficulty_control, mix, {s.name: s for s in cfg.tasks})
            if strategy is not None:
                _check_comparable(plan, strategy, cfg)
    return plan


def _check_comparable(plan: ExperimentPlan, strategy: Strategy, cfg: TrainConfig) -> None:
    """Every arm is scored on the base config's tasks with the base config's number of attempts (the report
    compares the arms task by task)."""
    attempts = plan.base["eval"]["attempts"]
    if cfg.eval.attempts != attempts:
        raise UserError(
            f"arm {strategy.name!r} sets eval.attempts={cfg.eval.attempts}, the base config {attempts}: "
            "set it in the base config so that every arm is scored the same way"
        )
    scored = {(retried_task_name(s.name) if attempts > 1 else None) or s.name for s in cfg.tasks}
    missing = [s["name"] for s in plan.base["tasks"] if s["name"] not in scored]
    if missing:
        hint = (
            "; with eval.attempts >= 2, env/retry:<task> is scored on <task>'s held-out problems"
            if attempts == 1 and any(retried_task_name(s.name) for s in cfg.tasks)
            else ""
        )
        raise UserError(
            f"arm {strategy.name!r} is not scored on {', '.join(missing)} (the base config's tasks, which the "
            f"report compares){hint}"
        )


def read_design_file(path: Path) -> dict[str, Any] | None:
    """An output directory's design record (``transfer.json``, ``specialists.json``): what the runs there were
    trained with, so that another design into the same directory is refused; None when there is none yet."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        raise UserError(f"{path} is not readable JSON; remove it or use another --out") from None


def run_finished(plan: ExperimentPlan, run: Path, run_file: str | None = None) -> bool:
    """Whether a run directory holds a finished run (its last eval written); finished runs are skipped.
    ``run_file``: the eval file an experiment writes last to each run (default: ``hard.json`` with a hard split,
    else ``after_rl.json``)."""
    return (run / "eval" / (run_file or ("hard.json" if plan.hard else "after_rl.json"))).exists()


def _hard_eval(trainer, plan: ExperimentPlan) -> dict[str, dict[str, float]]:
    from polyrl.train.evaluation import evaluate

    split = {n: (t, plan.hard[n]) for n, t in trainer.parts.mix.tasks.items()}
    return evaluate(trainer.config, trainer.parts.backend, trainer.parts.prompts, split, pass_k=1)


def train_from_warm_start(config: TrainConfig, sft_run: Path):
    """Run ``config``'s RL stage starting from the finished SFT run ``sft_run``: its directory is copied to
    ``config.run_dir`` and resumed there with ``config``. Returns the finished Trainer."""
    from polyrl.train.trainer import Trainer

    run = Path(config.run_dir)
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(sft_run, run, ignore=shutil.ignore_patterns("tb", "metrics.jsonl"))
    save_config(config, run / "config.yaml")
    trainer = Trainer(config, resume=True)
    trainer.run()
    return trainer


PRUNED_MARK = "CHECKPOINTS_PRUNED"
"""In a seed's SFT run once ``--prune-checkpoints`` deleted its checkpoint: no arm can start from it again."""

WALL_TIME_FILE = "wall_time.json"
"""Per run directory: the seconds this process spent on the run (training and evals), for budget estimates."""


def record_wall_time(run: Path, seconds: float) -> None:
    (run / WALL_TIME_FILE).write_text(json.dumps({"wall_s": round(seconds, 1)}))


def free_memory() -> None:
    """Collect what a finished run left (call after dropping the last name of its Trainer, before the next run
    of the same process is built; a real model's run holds several GB — measured on SmolLM2: 10 GB resident
    for a runner process that kept one finished run while training the next) and hand freed heap pages back
    to the OS (glibc's malloc_trim; a no-op elsewhere)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def refuse_pruned(plan: ExperimentPlan, run_file: str | None = None) -> None:
    """One-line refusal, before anything trains, when an arm still to train starts from a warm start whose
    checkpoint ``--prune-checkpoints`` deleted (the seed's arms had all finished; one was deleted since).
    ``run_file``: as in :func:`run_finished`."""
    for seed in plan.seeds:
        sft = plan.sft_dir(seed)
        if not (sft / PRUNED_MARK).exists():
            continue
        todo = [
            r for r in (plan.run_dir(a.name, seed) for a in plan.strategies) if not run_finished(plan, r, run_file)
        ]
        if todo:
            raise UserError(
                f"{todo[0]} has no finished run, but its warm start {sft} lost its checkpoint to --prune-checkpoints "
                f"once the seed's arms had finished; to train seed {seed} again, delete {sft} and its arms' runs"
            )


def prune_finished(plan: ExperimentPlan, seed: int, run_file: str | None = None) -> None:
    """``--prune-checkpoints`` for one seed: each finished arm run loses its checkpoints (optimizer states) and
    its copy of the warm start's ``sft_model`` (final model and evals stay) — runs finished by an earlier
    invocation included — and once every arm has finished, the seed's own SFT checkpoint goes too (marked with
    :data:`PRUNED_MARK`; kept when the warm start is shared by every seed)."""
    runs = [plan.run_dir(a.name, seed) for a in plan.strategies]
    finished = [run for run in runs if run_finished(plan, run, run_file)]
    for run in finished:
        shutil.rmtree(run / "checkpoints", ignore_errors=True)
        shutil.rmtree(run / "sft_model", ignore_errors=True)  # the copy of the SFT run's, which stays
    sft = plan.sft_dir(seed)
    if len(finished) == len(runs) and not plan.share_sft and (sft / "checkpoints").exists():
        (sft / PRUNED_MARK).write_text(
            "checkpoints deleted by --prune-checkpoints: every arm of the seed had finished\n"
        )
        shutil.rmtree(sft / "checkpoints")


def train_all(plan: ExperimentPlan, evaluate=None, files: tuple[str, str] = ("hard_sft.json", "hard.json"), log=print):
    """Train every (strategy, seed) not yet finished from its seed's SFT warm start. ``evaluate(trainer)`` of each
    finished run, when given, is written to ``eval/<files[0]>`` of the SFT run and ``eval/<files[1]>`` of each RL
    run; a run whose last file exists is skipped, so an interrupted experiment resumes. Each run's wall time is
    recorded for budget estimates."""
    from polyrl.train.trainer import Trainer

    sft_file, run_file = files if evaluate is not None else ("after_sft.json", "after_rl.json")
    refuse_pruned(plan, run_file)
    plan.out.mkdir(parents=True, exist_ok=True)
    for seed in plan.seeds:
        sft = plan.sft_dir(seed)
        if not (sft / "eval" / sft_file).exists():
            log(f"SFT warm start, seed {seed} → {sft}")
            t0 = time.perf_counter()
            trainer = Trainer(plan.config(None, seed), resume=(sft / "config.yaml").exists())
            trainer.run()
            if evaluate is not None:
                (sft / "eval" / sft_file).write_text(json.dumps(evaluate(trainer), indent=2))
            record_wall_time(sft, time.perf_counter() - t0)
            del trainer
            free_memory()
        for strategy in plan.strategies:
            run = plan.run_dir(strategy.name, seed)
            if run_finished(plan, run, run_file):
                continue
            log(f"RL with {strategy.name}, seed {seed} → {run}")
            t0 = time.perf_counter()
            trainer = train_from_warm_start(plan.config(strategy, seed), sft)
            if evaluate is not None:
                (run / "eval" / run_file).write_text(json.dumps(evaluate(trainer), indent=2))
            record_wall_time(run, time.perf_counter() - t0)
            del trainer
            free_memory()
            if plan.prune_checkpoints:
                prune_finished(plan, seed, run_file)
        if plan.prune_checkpoints:  # also when every arm was finished by an earlier invocation
            prune_finished(plan, seed, run_file)


def _train_seeds(plan: ExperimentPlan, log=print) -> None:
    """``train_all`` for ``plan``'s seeds, with the hard-split eval when the plan has a hard split."""
    train_all(plan, (lambda trainer: _hard_eval(trainer, plan)) if plan.hard else None, log=log)


def _train_one_seed(plan: ExperimentPlan, seed: int) -> int:
    """Worker of :func:`train_parallel`: the SFT run and every strategy of one seed, logged with its seed."""
    _train_seeds(dataclasses.replace(plan, seeds=[seed]), log=lambda m: print(f"[seed {seed}] {m}", flush=True))
    return seed


def train_parallel(plan: ExperimentPlan, jobs: int, log=print) -> None:
    """Train the seeds in up to ``jobs`` worker processes, one seed per process at a time (a seed's SFT run and
    its strategies stay in order in one process, so runs are the same as in one process). Each worker runs at
    the config's ``threads``. The first failure is raised once every worker has stopped; finished runs stay,
    so a rerun resumes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    refuse_pruned(plan)
    todo = [s for s in plan.seeds if not all(run_finished(plan, plan.run_dir(a.name, s)) for a in plan.strategies)]
    if plan.prune_checkpoints:
        for seed in set(plan.seeds) - set(todo):  # finished by an earlier invocation, perhaps without the flag
            prune_finished(plan, seed)
    if not todo:
        return
    workers = min(jobs, len(todo))
    log(f"training seeds {', '.join(map(str, todo))} in {workers} worker process{'es' if workers > 1 else ''}")
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_train_one_seed, plan, s) for s in todo]
        errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error


def run_experiment(
    plan: ExperimentPlan, log=print, command: str | None = None, jobs: int = 1, **report
) -> dict[str, Any]:
    """Train every (strategy, seed) not yet finished — with ``jobs > 1``, seeds in parallel worker processes —
    then write the report; returns the summary."""
    from polyrl.experiments.report import write_report

    if jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    if jobs > 1 and len(plan.seeds) > 1:
        train_parallel(plan, jobs, log=log)
    else:
        _train_seeds(plan, log=log)
    return write_report(plan, command, **report)
