"""The training pipeline across processes: ``torchrun --nproc_per_node N -m polyrl train --config …``.

``FSDPTrainer`` is the :class:`~polyrl.train.trainer.Trainer` with :class:`FSDPPlacement` instead of the
one-process placement: the policy (and the KL reference) sharded by FSDP2 (``polyrl.distributed.fsdp``).
What changes, and only this:

- rollouts: each rank generates and scores its share of the groups on an unsharded replica, and every rank
  gets every group (:class:`~polyrl.distributed.fsdp.RankSource`, ``RankScorer``); advantages and
  normalizers are global;
- the device: this rank's own GPU (``cuda:LOCAL_RANK``) on CUDA, the CPU (gloo) otherwise;
- updates: each rank trains its rows of each minibatch (``policy_update(..., ranks=)``; ``sft_step`` likewise);
- the run directory: rank 0 writes it (metrics, TensorBoard, evaluation, models); the others write nothing;
- checkpoints: the model and optimizer as sharded ``torch.distributed.checkpoint`` state in ``model/``,
  the rest as in one process; the Hugging Face models (``sft_model/``, ``final_model/``) are gathered;
- generation and evaluation: on an unsharded replica per rank, synced after every update; rank 0 evaluates;
- LoRA: the frozen base is sharded with the adapters in its layers, only the adapters train, and the KL reference
  is the sharded policy with its adapters disabled (docs/from-trl.md, "LoRA on several processes").
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from polyrl.algos import uses_critic
from polyrl.distributed.fsdp import (
    DistributedRanks,
    RankScorer,
    RankSource,
    load_sharded,
    save_sharded,
    shard_model,
    stage_directory,
    sync_replica,
)
from polyrl.errors import UserError
from polyrl.learner import BaseModelReference
from polyrl.policy.backends import get_backend
from polyrl.run_dir import RunDir, SilentRunDir
from polyrl.train.checkpoint import Checkpoint, load_model_weights, restore_rng, save_checkpoint
from polyrl.train.config import TrainConfig
from polyrl.train.placement import LocalPlacement
from polyrl.train.trainer import Trainer


def check_fsdp_config(config: TrainConfig) -> None:
    """Refuse, in one line, what multi-process training cannot do (before any process starts work)."""
    if not get_backend(config.generation.engine).shares_weights:
        raise UserError(
            f"multi-process (FSDP) training cannot use generation.engine={config.generation.engine}: a colocated "
            "engine would need the full weights on every rank beside the shards; use generation.engine=transformers"
        )
    if config.backend == "ray":
        raise UserError(
            "multi-process (FSDP) training cannot roll out on Ray yet (backend=ray): Ray workers need the full "
            "weights after every update, which the sharded learner does not send; use one process with Ray, "
            "or several processes with backend=local"
        )
    if uses_critic(config.rl.advantage):
        raise UserError(
            "multi-process (FSDP) training does not shard a critic yet: rl.advantage=gae needs one process"
        )
    if config.rl.gradient_surgery != "none":
        raise UserError(
            "multi-process (FSDP) training cannot use rl.gradient_surgery: per-task backward passes differ "
            "between ranks; use rl.gradient_surgery=none"
        )
    if config.selfplay.enabled:
        raise UserError(
            "multi-process (FSDP) training cannot run self-play yet: the game's two rollout rounds run in one "
            "process; use one process for selfplay.enabled runs"
        )


class _StagedShards:
    """Stands in for the model in ``save_checkpoint``: the DCP shards all ranks wrote beside the checkpoint
    move into it as ``model/`` (and are digested with the rest)."""

    def __init__(self, staged):
        self.staged = staged

    def save_pretrained(self, path, safe_serialization: bool = True) -> None:
        self.staged.rename(path)


class _StateInShards:
    """Stands in for the optimizer in ``save_checkpoint``: its state is in the DCP shards (``model/``)."""

    @staticmethod
    def state_dict() -> dict:
        return {"saved_in": "model/ (torch.distributed.checkpoint)"}


class FSDPPlacement(LocalPlacement):
    """The policy sharded across the ranks of ``ranks``; each rank generates on its own unsharded replica."""

    def __init__(self, ranks: DistributedRanks, device: torch.device):
        super().__init__(device)
        self.ranks = ranks
        self.is_writer = ranks.is_writer
        self.replica = None
        """The unsharded copy each rank generates (and rank 0 evaluates and saves) with."""
        self._model = None
        self._replica_current = False

    def open_run_dir(self, path: str, trackers: Callable[[], list], resume: bool) -> RunDir:
        if self.ranks.is_writer:
            return super().open_run_dir(path, trackers, resume)
        return SilentRunDir(path)

    # -- generation on the unsharded replica ----------------------------------------------------------
    def make_backend(self, policy, make: Callable[[Any], Any]):
        """The backend generates with an unsharded replica of the policy, synced after every update: no
        collective while sampling (ranks generate different lengths), at the cost of one full copy of the
        weights per rank (docs/scaling.md, "Several processes"). The policy is sharded after the copy."""
        self._model = policy.model
        self.replica = copy.deepcopy(policy.model).requires_grad_(False)
        backend = make(self.replica)
        shard_model(policy.model)
        return backend

    def rollouts(self, source, scorer):
        """Each rank generates and scores its share of the groups; every rank gets every group."""
        return RankSource(source, self.ranks), RankScorer(scorer, self.ranks)

    def sync_backend(self, backend, model, version: int) -> None:
        if not self._replica_current:
            sync_replica(model, self.replica)
        backend.sync_weights(self.replica, version)

    def evaluate(self, run: Callable[[], dict]) -> dict:
        """Rank 0 evaluates on its replica (on a forked RNG, so that the ranks' RNGs stay in step); every rank
        gets the results."""
        sync_replica(self._model, self.replica)
        results = None
        if self.ranks.is_writer:
            self._replica_current = True
            try:
                with torch.random.fork_rng(devices=[torch.cuda.current_device()] if torch.cuda.is_available() else []):
                    results = run()
            finally:
                self._replica_current = False
        return self.ranks.broadcast(results)

    # -- the sharded model in and out -----------------------------------------------------------------
    def reference_model(self, model, sft_model_dir: Path):
        """The frozen KL reference: under LoRA the sharded policy with its adapters disabled (as in one process);
        otherwise loaded from ``sft_model/`` and sharded like the policy."""
        if hasattr(model, "disable_adapter"):
            return BaseModelReference(model)
        reference = copy.deepcopy(self.replica).eval()
        load_model_weights(reference, sft_model_dir)
        return shard_model(reference.requires_grad_(False), trainable=False)

    def save_model(self, policy, final: Path, describe: Callable[[Path], None] | None = None) -> None:
        """The gathered weights as a plain Hugging Face checkpoint (and the LoRA adapter), written by rank 0."""
        sync_replica(policy.model, self.replica)
        if self.ranks.is_writer:
            super().save_model(dataclasses.replace(policy, model=self.replica), final, describe)
        self.ranks.barrier()  # the others may read it next (the KL reference)

    def save_checkpoint(self, root: Path, stage: str, step: int, training, state: dict, keep: int) -> None:
        """Every rank writes its shard of the model and optimizer (DCP) into a staging directory; rank 0 then
        writes the checkpoint around it (atomic rename, digests, LATEST) as in one process."""
        staged = root / f".sharded-{stage}-{step:06d}"
        stage_directory(staged, self.ranks)
        save_sharded(staged, training.model, training.optimizer)
        self.ranks.barrier()
        if self.ranks.is_writer:
            shards, in_shards = _StagedShards(staged), _StateInShards()
            save_checkpoint(root, stage, step, shards, in_shards, training.scheduler, state, keep)
            for stale in root.glob(".sharded-*"):  # left by a run killed while saving
                shutil.rmtree(stale, ignore_errors=True)
        self.ranks.barrier()

    def load_checkpoint(self, ckpt: Checkpoint, training) -> dict:
        load_sharded(ckpt.path / "model", training.model, training.optimizer)
        blob = torch.load(ckpt.path / "optim.pt", weights_only=False)
        training.scheduler.load_state_dict(blob["scheduler"])
        restore_rng(blob["rng"])
        return blob.get("tensors", {})

    def close(self) -> None:
        torch.distributed.destroy_process_group()


class FSDPTrainer(Trainer):
    """The Trainer on this rank of a multi-process run (``torchrun``): :class:`FSDPPlacement`, nothing else."""

    def __init__(self, config: TrainConfig, ranks: DistributedRanks, device: torch.device, resume: bool = False):
        check_fsdp_config(config)
        super().__init__(config, resume=resume, placement=FSDPPlacement(ranks, device))
