"""The training pipeline: SFT warm start → held-out eval → multi-task RL → held-out eval.

``Trainer(config).run()`` is what ``polyrl train`` calls. The Trainer only orchestrates; each job has its
own module (docs/architecture.md):

- ``train/build.py``: the run's parts from the config, every user error raised before training starts;
- ``train/state.py``: what is trained, and the one state dict a checkpoint keeps;
- ``train/sft_stage.py``: SFT and rejection-sampling fine-tuning;
- ``train/rl_stage.py``: the RL steps (collect → advantages → update → metrics);
- ``train/evaluation.py``: held-out evaluation of the policy;
- ``train/placement.py``: one process, or (``train/fsdp_trainer.py``) the policy sharded across ranks.

A run killed at any moment resumes from its last checkpoint with ``Trainer(config, resume=True)`` and, on
CPU with a fixed seed and thread count, ends with the same weights.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from polyrl.device import resolve_device
from polyrl.errors import UserError
from polyrl.eval import format_comparison
from polyrl.run_dir import atomic_write_text
from polyrl.train.build import build_run
from polyrl.train.checkpoint import latest_checkpoint
from polyrl.train.config import TrainConfig
from polyrl.train.evaluation import held_out
from polyrl.train.model_card import CardInputs, write_model_card
from polyrl.train.placement import LocalPlacement
from polyrl.train.progress import StageProgress
from polyrl.train.resume import check_resume, pin_models, save_run_config
from polyrl.train.rl_stage import RLStage
from polyrl.train.sft_stage import SFTStage
from polyrl.train.state import PolicyVersion, RunState, Training, TrainingError

__all__ = ["Trainer", "TrainingError", "resume_config", "train"]


class Trainer:
    """One training run: its parts (``parts``), what it trains and its state (``state``), the two stages
    (``sft``, ``rl``), and where the policy lives (``placement``: this process unless one is given, e.g.
    ``FSDPPlacement`` on each rank of a multi-process run)."""

    def __init__(self, config: TrainConfig, resume: bool = False, placement=None):
        config = pin_models(config, log=_log)  # every model name resolved, and Hub commits recorded, first
        self.config, self.resume = config, resume
        self.placement = placement if placement is not None else LocalPlacement(resolve_device(config.device))
        self.parts = build_run(config, resume, self.placement, PolicyVersion())
        self.state = RunState(self.parts, Training(self.parts.policy.model), self.placement)
        self.progress = StageProgress(config.progress and self.placement.is_writer)
        self.sft = SFTStage(self.parts, self.state, self.placement, self.progress, self.save_model)
        self.rl = RLStage(self.parts, self.state, self.placement, self.progress, self.evaluate)
        self.results: dict[str, Any] = {}
        """The held-out results so far (``after_sft``, ``after_rl``), as the model cards show them."""
        self.resume_from = latest_checkpoint(self.parts.run_dir.checkpoints) if resume else None
        """The checkpoint a resumed run goes on from (None: from the start)."""
        if self.resume_from is not None:
            try:  # nothing is written to the run directory before the resume is known to work
                check_resume(config, self.parts.run_dir, self.resume_from, self.parts.policy.model)
            except UserError:
                self._close()
                raise
        if self.parts.run_dir.writes:  # a resume's overrides are recorded with the step they took effect at
            self.config = save_run_config(config, self.parts.run_dir, resume, self.resume_from)

    # -- the pipeline ---------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """SFT (unless a checkpoint says it is done), the after-SFT evaluation, RL, the after-RL evaluation;
        returns the held-out results (and their comparison table)."""
        run_dir, ckpt = self.parts.run_dir, self.resume_from
        # everything logged after the checkpoint is redone below, and logged again exactly once
        if ckpt is None:
            run_dir.keep_metrics(0)
        elif "metrics_lines" in ckpt.state:
            run_dir.keep_metrics(ckpt.state["metrics_lines"])
        else:  # a checkpoint written before metrics_lines existed
            run_dir.truncate_metrics(ckpt.stage, ckpt.step)
        in_sft = ckpt is None or ckpt.stage == "sft"
        results = self.results
        try:
            if in_sft:
                self.sft.run(ckpt)
            results["after_sft"] = self.evaluate("after_sft", log=in_sft)
            self.describe_model("sft_model")
            if self.config.rl.enabled and self.config.rl.steps:
                self.rl.run(ckpt if not in_sft else None)
                self.save_model("final_model")
                results["after_rl"] = self.evaluate("after_rl")
                self.describe_model("final_model")
            run_dir.log_results(results)
        finally:
            self._close()
        if "after_rl" in results:
            table = format_comparison(results["after_sft"], results["after_rl"], labels=(self.first_eval, "after RL"))
            if run_dir.writes:
                atomic_write_text(run_dir.path / "summary.md", f"# Held-out accuracy\n\n{table}\n")
            results["table"] = table
        return results

    @property
    def first_eval(self) -> str:
        """What the first held-out evaluation (``after_sft``) is of: the SFT model, or the model RL starts from."""
        return "after SFT" if self.config.sft.enabled and self.config.sft.steps else "before RL"

    def evaluate(self, name: str, log: bool = True) -> dict[str, dict[str, float]]:
        """Held-out results ``name`` (computed, or read back: the after-SFT evaluation is done once per run);
        logged as an ``eval`` record at the current stage step and global step unless ``log`` is False (the
        record is already in the metrics)."""
        record = (lambda values: self.state.log("eval", self.state.step, values)) if log else None
        return self.placement.evaluate(lambda: held_out(self.parts, name, record, before=self._before_evaluation))

    def _before_evaluation(self) -> None:
        self.progress.stop()
        self.state.sync_backend()

    # -- weights out ----------------------------------------------------------------------------------
    def save_model(self, name: str) -> None:
        """The policy as a Hugging Face checkpoint in ``RUN_DIR/name`` (never one with NaN or infinite weights), its
        LoRA adapter in ``RUN_DIR/name/adapter``, and a model card."""
        final = self.parts.run_dir.model_dir(name)
        self.state.require_finite(str(final))
        self.placement.save_model(self.parts.policy, final, lambda d: write_model_card(d, self._card(), final))

    def describe_model(self, name: str) -> None:
        """Rewrite the model card of ``RUN_DIR/name`` with the held-out results so far (rank 0; when it exists)."""
        directory = self.parts.run_dir.model_dir(name)
        if self.parts.run_dir.writes and directory.is_dir():
            write_model_card(directory, self._card())

    def _card(self) -> CardInputs:
        ranks = self.placement.ranks
        source = self.parts.policy.source
        return CardInputs(self.config, source, dict(self.results), self.first_eval, ranks.world if ranks else 1)

    def _close(self) -> None:
        self.progress.stop()
        self.parts.run_dir.close()
        if self.parts.rollout_pool is not None:
            self.parts.rollout_pool.shutdown()
        if hasattr(self.parts.backend, "close"):
            self.parts.backend.close()
        self.placement.close()


def _log(message: str) -> None:
    print(f"polyrl: {message}", file=sys.stderr, flush=True)


def train(config: TrainConfig, resume: bool = False) -> dict[str, Any]:
    """Run the whole pipeline described by ``config``; returns the held-out results."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Trainer(config, resume=resume).run()


def resume_config(run_dir: str | Path) -> TrainConfig:
    """The saved config of the run in ``run_dir`` (an earlier version's keys upgraded)."""
    from polyrl.train.config import load_config

    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise UserError(f"{str(run_dir)!r} is not a polyrl run directory (no config.yaml)")
    return load_config(path, saved=True)
