"""The SFT stage: a warm start on the tasks' reference solutions, then rounds of rejection-sampling
fine-tuning on the policy's own verified-correct samples; it ends by saving ``sft_model/``.

Each step draws a fresh batch of reference problems (``sft_data.reference_batch``) at the step's seed and
takes one optimizer step through the placement (one process, or each rank its share). Steps are
logged as ``stage: sft`` records and checkpointed every ``checkpoint_every`` steps.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from polyrl.learner import SFT_WEIGHT_DECAY, sft_step
from polyrl.train import sft_data
from polyrl.train.checkpoint import Checkpoint


class SFTStage:
    """The SFT stage of the pipeline (before RL), over the run's parts, state and placement."""

    def __init__(self, parts, state, placement, progress, save_model):
        self.parts, self.state, self.placement, self.progress = parts, state, placement, progress
        self.training = state.training
        self.save_model = save_model

    def run(self, ckpt: Checkpoint | None) -> None:
        """SFT from the start, or from ``ckpt`` (an SFT checkpoint)."""
        cfg = self.parts.config.sft
        total = cfg.steps if cfg.enabled else 0
        self.training.make_optimizer(cfg.lr, cfg.warmup_steps, total, cosine=True, weight_decay=SFT_WEIGHT_DECAY)
        start = 0
        if ckpt is not None:
            self.state.restore(ckpt)
            start = ckpt.step
        self.state.step = start
        self.progress.start("SFT", total, start)
        for step in range(start, total):
            self._step(step, total)
        for rnd in range(cfg.rejection_sampling_rounds if total > start else 0):
            self.rejection_round(rnd)
        # the SFT model is saved before the stage's last checkpoint: a checkpoint that marks SFT complete
        # always has its sft_model/ beside it (and a resume re-saves one lost in between)
        if total > start or ckpt is None or not self.parts.run_dir.model_dir("sft_model").exists():
            self.save_model("sft_model")
        if total > start or ckpt is None:
            self.state.checkpoint("sft", total)

    def _step(self, step: int, total: int) -> None:
        parts, cfg = self.parts, self.parts.config.sft
        rng = parts.seed_step("sft", step)
        t0 = time.perf_counter()
        batch = sft_data.reference_batch(
            parts.mix.reference_tasks(),
            parts.mix.sft_difficulty,
            parts.prompts,
            parts.policy.tokenizer.eos_token_id,
            rng,
            cfg.batch_size,
        )
        loss = self.train_on(batch)
        self.state.step_done(loss is not None, "sft", step)
        self.state.step = step + 1
        self.state.global_step += 1
        loss = loss if loss is not None else float("nan")
        self.state.log(
            "sft", step + 1, {"loss": loss, "lr": self.training.lr(), "step_time": time.perf_counter() - t0}
        )
        self.progress.update(step + 1, {"loss": loss})
        if (step + 1) % parts.config.checkpoint_every == 0 and step + 1 < total:
            self.state.checkpoint("sft", step + 1)

    def train_on(self, sequences) -> float | None:
        """One optimizer step on ``sequences`` (and the schedule's step unless the loss was non-finite)."""
        training, placement = self.training, self.placement
        loss = sft_step(
            training.model,
            training.optimizer,
            training.parameters(),
            self.parts.policy.tokenizer.pad_token_id,
            sequences,
            self.parts.config.sft.micro_batch_tokens,
            placement.device,
            placement.ranks,
        )
        if loss is not None:
            self.training.scheduler.step()
        return loss

    def rejection_round(self, rnd: int) -> None:
        """Sample the policy on fresh problems, keep the verified-correct completions, fine-tune on them."""
        parts, cfg = self.parts, self.parts.config.sft
        rng = parts.seed_step("rft", rnd)
        self.state.sync_backend()
        sampling = dataclasses.replace(parts.sampling(), group_size=cfg.rejection_samples)
        data, pass_rate = sft_data.rejection_samples(
            parts.mix.tasks,
            parts.mix.sft_difficulty,
            parts.backend,
            parts.prompts,
            rng,
            cfg.rejection_problems,
            sampling,
        )
        losses = []
        for _ in range(cfg.rejection_steps if data else 0):
            pick = rng.integers(len(data), size=min(cfg.batch_size, len(data)))
            loss = self.train_on([data[i] for i in pick])
            if loss is not None:
                losses.append(loss)
        self.state.log(  # at the stage's last step: a round's optimizer steps are not steps of the schedule
            "sft",
            cfg.steps,
            {
                "rft_round": rnd,
                "rft_pass_rate": pass_rate,
                "rft_examples": len(data),
                "rft_loss": float(np.mean(losses)) if losses else float("nan"),
            },
        )
