"""``polyrl train``: SFT warm start then multi-task RL, with held-out evaluation before and after RL."""

from __future__ import annotations

import errno
import time
from importlib.resources import files
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from polyrl.errors import UserError

DEFAULT_CONFIG = "default"


def default_config_path() -> Path:
    return Path(str(files("polyrl") / "configs" / "default.yaml"))


def print_results(results: dict, console: Console, first: str = "after SFT") -> None:
    """The held-out table: the first evaluation (``first``: after SFT, or before RL when SFT is off), after RL."""
    from polyrl.eval.heldout import comparison_rows

    before, after = results["after_sft"], results.get("after_rl")
    pct = lambda x: "–" if x is None else f"{100 * x:.1f}%"
    table = Table(title="Held-out accuracy (greedy) per task")
    table.add_column("task")
    table.add_column(first, justify="right")
    if after:
        table.add_column("after RL", justify="right")
        table.add_column("Δ (points)", justify="right")
    for name, b, a, d in comparison_rows(before, after or {}):
        cells = [pct(b)] + ([pct(a), "–" if d is None else f"{100 * d:+.1f}"] if after else [])
        table.add_row(f"[bold]{name}[/]" if name == "mean" else name, *cells)
    console.print(table)


RUN_FILES = ("metrics.jsonl", "tb/", "sft_model/", "final_model/", "eval/")
"""What the closing line lists, in this order, when the run directory holds it."""


def written(run_dir: Path, cfg) -> str:
    """The closing line: what the run directory holds (only what is there), and why the RL outputs are not, when
    RL did not run (``rl.steps=0`` listed ``final_model/``, which it never writes)."""
    held = [name for name in RUN_FILES if (run_dir / name.rstrip("/")).exists()]
    line = f"run directory: {run_dir}  ({', '.join(held)})"
    if not (cfg.rl.enabled and cfg.rl.steps):
        why = "rl.enabled is false" if not cfg.rl.enabled else "rl.steps is 0"
        line += f"; no RL ran ({why}): no final_model/ or summary.md, the model is sft_model/"
    return line


def _resume_keeps_its_place(resume: Path, run_dir: str | None, overrides: list[str]) -> None:
    """A resumed run stays where it is and keeps its own history: ``--run-dir``, ``run_dir=`` and ``resumes=`` with
    ``--resume`` were ignored without a word (issue #43); they are refused in one line."""
    from polyrl.train.config import parse_overrides

    keys = [key for key, _ in parse_overrides(overrides) if key in ("run_dir", "resumes")]
    if "resumes" in keys:
        raise UserError(
            f"--resume {resume} with resumes: the resume history is written by polyrl (each resume's overrides and "
            "the checkpoint they took effect at); leave it out"
        )
    if run_dir is not None or keys:
        raise UserError(
            f"--resume {resume} with {'--run-dir' if run_dir is not None else 'run_dir'}: a resumed run stays in "
            f"{resume}; to train elsewhere, start a new run (copy the run directory first to branch from it)"
        )


def register(app: typer.Typer) -> None:
    @app.command()
    def train(
        overrides: list[str] | None = typer.Argument(None, help="Config overrides key=value, e.g. rl.steps=50."),
        config: str | None = typer.Option(None, "--config", "-c", help="YAML config (default: the embedded default)."),
        resume: Path | None = typer.Option(None, "--resume", help="Continue the run in this run directory."),
        run_dir: str | None = typer.Option(None, "--run-dir", help="Where to write the run (default: runs/<time>)."),
        ray: str | None = typer.Option(
            None,
            "--ray",
            metavar="ADDRESS",
            help="Roll out on Ray workers: 'local' starts a local instance, host:port joins a cluster.",
        ),
        nproc: int | None = typer.Option(
            None, "--nproc", help="Train on N processes (FSDP2): re-runs this command under torchrun."
        ),
    ) -> None:
        """Train a policy: SFT warm start, then multi-task RL; prints held-out accuracy after each."""
        from polyrl.device import describe
        from polyrl.distributed.fsdp import launched_by_torchrun
        from polyrl.train.config import load_config
        from polyrl.train.trainer import Trainer, TrainingError

        overrides = list(overrides or [])
        if nproc is not None and nproc < 1:
            raise UserError(f"--nproc must be at least 1, got {nproc}")
        if ray is not None:  # same as backend=ray [ray.address=ADDRESS]; later key=value overrides still apply
            overrides = ["backend=ray"] + ([f"ray.address={ray}"] if ray != "local" else []) + overrides
        if resume is not None:
            if config is not None:
                raise UserError("--resume continues a run with its saved config; do not pass --config")
            _resume_keeps_its_place(resume, run_dir, overrides)
            cfg_file = resume / "config.yaml"
            if not cfg_file.exists():
                raise UserError(f"{str(resume)!r} is not a polyrl run directory (no config.yaml)")
            cfg = load_config(cfg_file, overrides, saved=True)
            cfg = cfg.model_copy(update={"run_dir": str(resume)})
        else:
            path = default_config_path() if config in (None, DEFAULT_CONFIG) else Path(config)
            base = {"run_dir": run_dir or f"runs/{time.strftime('%Y%m%d-%H%M%S')}"}
            cfg = load_config(path, overrides, base=base)
            if run_dir is not None:
                cfg = cfg.model_copy(update={"run_dir": run_dir})
        if nproc is not None and not launched_by_torchrun():
            from polyrl.cli.torchrun import relaunch
            from polyrl.policy.hf_vision import model_type

            if Path(cfg.model.path).is_dir() and model_type(cfg.model.path) is not None:  # a Hub id: the ranks say so
                raise UserError(
                    f"--nproc: {cfg.model.path} is a Hugging Face vision-language model, which trains in one process only"
                )

            raise typer.Exit(relaunch(nproc, cfg, config, resume, overrides))
        console = Console()
        if launched_by_torchrun():
            from polyrl.cli.torchrun import fsdp_trainer

            trainer = fsdp_trainer(cfg, resume is not None, run_dir)
            cfg, console = trainer.config, Console(quiet=not trainer.placement.ranks.is_writer)
        else:
            trainer = Trainer(cfg, resume=resume is not None)
        placed = describe(trainer.placement.device) + (" (device=auto)" if cfg.device == "auto" else "")
        console.print(f"[bold]polyrl train[/] → {cfg.run_dir} on {placed}")
        try:
            results = trainer.run()
        except TrainingError as exc:
            console.print(f"[red]polyrl: training stopped:[/] {exc}")
            raise typer.Exit(1) from None
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            where = exc.filename or cfg.run_dir
            raise UserError(
                f"the disk is full (writing {where}): free space, then polyrl train --resume {cfg.run_dir}"
            ) from None
        print_results(results, console, trainer.first_eval)
        console.print(written(Path(cfg.run_dir), cfg), highlight=False)
