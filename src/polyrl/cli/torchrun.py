"""``polyrl train`` across processes: ``--nproc N`` re-runs the command under ``torchrun``; under torchrun each
rank joins the process group and trains its shard (``polyrl.train.fsdp_trainer``)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from polyrl.errors import UserError


def relaunch(nproc: int, cfg, config: str | None, resume: Path | None, overrides: list[str]) -> int:
    """Run ``polyrl train`` on ``nproc`` processes with torchrun (``torch.distributed.run``); the exit code: 0,
    2 when a rank stopped on a user error (it printed the line), 1 otherwise.
    The config is checked here first, so an impossible combination fails before any process starts."""
    from polyrl.train.fsdp_trainer import check_fsdp_config
    from polyrl.train.resume import changed_settings, pin_models

    check_fsdp_config(cfg)
    # models are resolved (a Hub id downloaded) once, here, and every rank loads the commits this found
    pinned = changed_settings(cfg, pin_models(cfg, log=lambda m: print(f"polyrl: {m}", file=sys.stderr, flush=True)))
    overrides = [*overrides, *(f"{key}={json.dumps(value)}" for key, value in pinned.items())]
    if resume is None and (Path(cfg.run_dir) / "config.yaml").exists():
        raise UserError(
            f"run directory {cfg.run_dir!r} already holds a run: use --resume {cfg.run_dir} or another run_dir"
        )
    try:
        import torch.distributed as dist
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.run import parse_args, run
    except ImportError:
        raise UserError("--nproc needs torch.distributed (torchrun), which this torch build lacks") from None
    if not dist.is_available():
        raise UserError("--nproc needs torch.distributed, which this torch build lacks")
    args = ["train", *overrides]
    if resume is not None:
        args += ["--resume", str(resume)]
    else:  # the run directory is fixed here, so that every rank writes the same run
        args += ["--config", config or "default", "--run-dir", cfg.run_dir]
    # torchrun's default, without its banner (config.threads, when set, applies inside each rank)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # the ranks print their own errors (a user error is one line, exit code 2): keep the agent's report quiet
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    try:
        run(parse_args(["--standalone", f"--nproc_per_node={nproc}", "-m", "polyrl", *args]))
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        if failure.exitcode != 2:
            print(f"polyrl: rank {rank} failed (exit code {failure.exitcode})", file=sys.stderr)
        return 2 if failure.exitcode == 2 else 1
    return 0


def fsdp_trainer(cfg, resume: bool, run_dir: str | None):
    """This rank's :class:`~polyrl.train.fsdp_trainer.FSDPTrainer`; a fresh run without ``--run-dir`` takes
    rank 0's default directory name (the ranks may have started in different seconds)."""
    from polyrl.device import resolve_device
    from polyrl.distributed.fsdp import init_process_group
    from polyrl.train.fsdp_trainer import FSDPTrainer, check_fsdp_config

    check_fsdp_config(cfg)
    device = resolve_device(cfg.device, local_rank=int(os.environ["LOCAL_RANK"]))
    ranks = init_process_group(device)
    if not resume and run_dir is None:
        cfg = cfg.model_copy(update={"run_dir": ranks.broadcast(cfg.run_dir)})
    return FSDPTrainer(cfg, ranks, device, resume=resume)
