"""Where the policy lives: one process (:class:`LocalPlacement`) or sharded across ranks (``FSDPPlacement``).

The placement owns the device (``placement.device``: the config's ``device`` resolved once; under FSDP this rank's
``cuda:LOCAL_RANK``): the policy is loaded there, the KL reference and the critic follow it, and every batch the
learner trains on moves there. The Trainer and its stages never ask which placement it is; they hand it what only
it can do differently: open the run directory, build the generation backend over the right weights, give the
backend the current weights, run an evaluation, build the KL reference, save a Hugging Face model, write and read
a checkpoint. ``polyrl.train.fsdp_trainer.FSDPPlacement`` is the other implementation.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from polyrl.learner import BaseModelReference
from polyrl.learner.ranks import ONE_PROCESS
from polyrl.run_dir import RunDir
from polyrl.train.checkpoint import (
    Checkpoint,
    load_model_weights,
    load_training_state,
    save_checkpoint,
    save_model_dir,
)


class LocalPlacement:
    """The policy in this process, on ``device``: the backend samples from its tensors, the run directory is
    written here."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        """Where the policy, the KL reference, the critic and every training batch live."""

    ranks = ONE_PROCESS
    """The processes the learner's work is split across: this one (``DistributedRanks`` when sharded)."""
    is_writer = True
    """This process writes the run directory (every rank but 0 of a sharded run writes nothing)."""

    def open_run_dir(self, path: str, trackers: Callable[[], list], resume: bool) -> RunDir:
        """The run directory, created (or checked, on resume), with the experiment trackers ``trackers()`` opens."""
        run_dir = RunDir(path, trackers=trackers())
        run_dir.create(resume=resume)
        return run_dir

    def make_backend(self, policy, make: Callable[[Any], Any]):
        """``make(model)`` over the policy's own model (a backend that shares its tensors needs no copy)."""
        return make(policy.model)

    def rollouts(self, source, scorer):
        """The step's rollout source and reward scorer, as this placement runs them (here: unchanged)."""
        return source, scorer

    def sync_backend(self, backend, model, version: int) -> None:
        """Give the backend the current weights (a no-op for transformers, which shares them)."""
        backend.sync_weights(model, version)

    def evaluate(self, run: Callable[[], dict]) -> dict:
        """``run()``'s held-out results."""
        return run()

    def reference_model(self, model, sft_model_dir: Path):
        """The frozen KL reference: the policy as it was when RL started. Under LoRA, the policy model itself
        (its log-probs are taken with the adapters disabled: the base model, no copy); otherwise a copy
        loaded from ``sft_model/``, the same in a fresh and a resumed run."""
        if hasattr(model, "disable_adapter"):
            return BaseModelReference(model)
        reference = copy.deepcopy(model).eval().requires_grad_(False)
        load_model_weights(reference, sft_model_dir)
        return reference

    def save_model(self, policy, final: Path, describe: Callable[[Path], None] | None = None) -> None:
        """Save the policy as a Hugging Face checkpoint in ``final`` (and its LoRA adapter in ``final/adapter``),
        then ``describe(directory)`` (the model card), atomically: a temporary directory renamed into place."""

        def save(directory: Path) -> None:
            policy.save(directory)
            if describe is not None:
                describe(directory)

        save_model_dir(final, save)

    def save_checkpoint(self, root: Path, stage: str, step: int, training, state: dict, keep: int) -> None:
        """``training`` (a :class:`~polyrl.train.state.Training`): model, optimizer, scheduler, critic."""
        save_checkpoint(
            root,
            stage,
            step,
            training.model,
            training.optimizer,
            training.scheduler,
            state,
            keep,
            tensors={"critic": training.critic.state_dict()} if training.critic is not None else None,
        )

    def load_checkpoint(self, ckpt: Checkpoint, training) -> dict[str, Any]:
        """Model, optimizer, scheduler and RNG states from ``ckpt``; the tensors saved with them."""
        return load_training_state(ckpt, training.model, training.optimizer, training.scheduler)

    def close(self) -> None:
        """The run is over (a sharded run leaves its process group)."""
