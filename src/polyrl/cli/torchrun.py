"""``polyrl train`` across processes: ``--nproc N`` re-runs the command under ``torchrun``; under torchrun each
rank joins the process group and trains its shard (``polyrl.train.fsdp_trainer``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from polyrl.errors import UserError


def relaunch(nproc: int, cfg, config: str | None, resume: Path | None, overrides: list[str]) -> int:
    """Run ``polyrl train`` on ``nproc`` processes with ``python -m torch.distributed.run``; its exit code.
    The config is checked here first, so an impossible combination fails before any process starts."""
    from polyrl.train.fsdp_trainer import check_fsdp_config

    check_fsdp_config(cfg)
    if resume is None and (Path(cfg.run_dir) / "config.yaml").exists():
        raise UserError(
            f"run directory {cfg.run_dir!r} already holds a run: use --resume {cfg.run_dir} or another run_dir"
        )
    try:
        import torch.distributed as dist
        import torch.distributed.run  # noqa: F401
    except ImportError:
        raise UserError("--nproc needs torch.distributed (torchrun), which this torch build lacks") from None
    if not dist.is_available():
        raise UserError("--nproc needs torch.distributed, which this torch build lacks")
    args = ["train", *overrides]
    if resume is not None:
        args += ["--resume", str(resume)]
    else:  # the run directory is fixed here, so that every rank writes the same run
        args += ["--config", config or "default", "--run-dir", cfg.run_dir]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    return subprocess.call([*launcher, "-m", "polyrl", *args])


def fsdp_trainer(cfg, resume: bool, run_dir: str | None):
    """This rank's :class:`~polyrl.train.fsdp_trainer.FSDPTrainer`; a fresh run without ``--run-dir`` takes
    rank 0's default directory name (the ranks may have started in different seconds)."""
    from polyrl.distributed.fsdp import init_process_group
    from polyrl.train.fsdp_trainer import FSDPTrainer, check_fsdp_config

    check_fsdp_config(cfg)
    ranks = init_process_group(cfg.device)
    if not resume and run_dir is None:
        cfg = cfg.model_copy(update={"run_dir": ranks.broadcast(cfg.run_dir)})
    return FSDPTrainer(cfg, ranks, resume=resume)
