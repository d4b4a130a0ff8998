"""The RL stage: ``rl.steps`` steps of collect → advantages → update → metrics (docs/architecture.md).

One step, with the objects between its stages:

1. ``collect`` (``rollout.collect.collect_groups``): the step's problems from the sampler, rolled out and
   scored in groups → :class:`~polyrl.rollout.collect.Collected` (the trajectories and the collector's counts);
2. ``prepare_update`` (``learner/update_batch.py``): advantages and the rows to train on → ``UpdateBatch``;
3. ``policy_update`` (``learner/update.py``): the objective over epochs × minibatches, each micro-batch moved
   to the placement's device → ``UpdateResult``;
4. ``step_metrics`` (``train/metrics.py``): every metric the step logs, named there.

The update reads the frozen :class:`~polyrl.learner.settings.UpdateSettings` built once from the config.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from polyrl.algos import uses_critic
from polyrl.learner import critic_update, policy_update, prepare_update
from polyrl.rewards import scoring
from polyrl.rollout.collect import Collected, collect_groups
from polyrl.train.checkpoint import Checkpoint
from polyrl.train.metrics import TermFailures, step_metrics


class RLStage:
    """The RL stage of the pipeline (after SFT), over the run's parts, state and placement."""

    def __init__(self, parts, state, placement, progress, evaluate):
        self.parts, self.state, self.placement, self.progress = parts, state, placement, progress
        self.training = state.training
        self.evaluate = evaluate
        self.score = scoring(parts.mix.tasks, parts.config.reward, parts.config.rl.max_new_tokens, parts.reward_scorer)
        """Stage 2, with everything but the trajectories fixed (each task's reward weights resolved once)."""
        self.reference = None
        """The frozen KL reference (with ``rl.kl_coef > 0``)."""
        self.term_failures = TermFailures()

    def run(self, ckpt: Checkpoint | None) -> None:
        """RL from the start, or from ``ckpt`` (an RL checkpoint)."""
        cfg = self.parts.config.rl
        self.training.make_optimizer(cfg.lr, cfg.warmup_steps, cfg.steps, cosine=False, weight_decay=cfg.weight_decay)
        if cfg.kl_coef > 0:
            self.reference = self.reference_model()
        if uses_critic(cfg.advantage):
            from polyrl.critic import Critic

            self.training.critic = Critic(cfg.critic, self.training.model, self.placement.device)
        start = 0
        if ckpt is not None:
            self.state.restore(ckpt)
            start = ckpt.step
        self.state.step = start  # a run resumed from its last RL checkpoint logs its final eval at that step
        self.broadcast_weights()
        if self.training.critic is not None and start == 0 and cfg.critic.warmup_steps:
            self.critic_warmup(cfg.critic.warmup_steps)
        self.progress.start("RL", cfg.steps, start)
        try:
            for step in range(start, cfg.steps):
                self._step_and_log(step)
        finally:
            self._warn_failed_terms()

    def _step_and_log(self, step: int) -> None:
        """RL step ``step`` + 1: the step, its record, its periodic evaluation and checkpoint."""
        parts, cfg = self.parts, self.parts.config.rl
        every = parts.config.eval.every
        self.state.step = step + 1
        self.state.global_step += 1
        metrics = self.step(step, parts.seed_step("rl", step))
        self.state.log("rl", step + 1, metrics)
        self.progress.update(step + 1, {k: metrics[k] for k in ("reward", "accuracy", "entropy") if k in metrics})
        if every and (step + 1) % every == 0 and step + 1 < cfg.steps:
            self.evaluate(f"rl_step_{step + 1:06d}")
            self.progress.start("RL", cfg.steps, step + 1)
        if (step + 1) % parts.config.checkpoint_every == 0 or step + 1 == cfg.steps:
            self.state.checkpoint("rl", step + 1)

    def _warn_failed_terms(self) -> None:
        lines = self.term_failures.warnings() if self.placement.is_writer else []
        if lines:
            self.progress.stop()
            print("\n".join(lines), file=sys.stderr, flush=True)

    def broadcast_weights(self) -> None:
        """The current weights to every generator of RL rollouts: the backend and, with Ray, the workers."""
        self.state.sync_backend()
        if self.parts.rollout_pool is not None:
            self.parts.rollout_pool.sync_weights(self.training.model, self.state.policy_version)

    def reference_model(self):
        """The frozen KL reference: the policy as SFT left it (``sft_model/``), placed like the policy."""
        return self.placement.reference_model(self.training.model, self.parts.run_dir.model_dir("sft_model"))

    def step(self, step: int, rng: np.random.Generator) -> dict[str, Any]:
        """One RL step, stage by stage: collect scored groups → advantages and the rows to train on → the
        policy update → metrics. Returns the step's metrics."""
        parts, training = self.parts, self.training
        t0 = time.perf_counter()
        collected = self.collect(step, rng)
        self.term_failures.add(collected.generated)
        trajs = collected.trajectories
        batch = update = None
        if trajs:
            pad_id, settings = parts.policy.tokenizer.pad_token_id, parts.update_settings
            batch = prepare_update(trajs, list(parts.mix.tasks), pad_id, settings, training.critic)
            update = policy_update(
                training.model,
                training.optimizer,
                batch,
                settings,
                training.parameters(),
                reference=self.reference,
                critic=training.critic,
                ranks=self.placement.ranks,
                device=self.placement.device,
            )
            if update.updates:  # none: every advantage was zero, nothing to learn from this batch
                learned = update.skipped_updates < update.updates
                self.state.step_done(learned, "rl", step)
                if learned:
                    self.state.policy_version += 1
                    self.broadcast_weights()
        training.scheduler.step()
        elapsed = time.perf_counter() - t0
        return step_metrics(
            collected,
            batch,
            update,
            elapsed,
            lr=training.lr(),
            curriculum=(parts.sampler, parts.mix.difficulty_controller),
        )

    def collect(self, step: int, rng: np.random.Generator) -> Collected:
        """Stages 1 and 2 of an RL step: the step's scored groups from the rollout source (in process or on Ray), and the
        self-play game's groups when it is on."""
        parts, cfg = self.parts, self.parts.config.rl
        parts.sampler.set_step(step)

        def make_problems(n: int):
            return parts.sampler.draw(n, rng, parts.mix.tasks, parts.mix.difficulty)

        collected = collect_groups(
            parts.source,
            cfg.prompts_per_step,
            make_problems,
            self.score,
            self._observe,
            cfg.dynamic_sampling,
            cfg.max_refills,
        )
        if parts.selfplay is not None:  # the game's proposer and solver groups (not shown to the curriculum)
            game = parts.selfplay.collect(rng, parts.mix.difficulty, self.score, cfg.dynamic_sampling)
            collected = collected.merged(game)
        return collected

    def _observe(self, group) -> None:
        """The curriculum sees every generated group's verifier scores (dropped groups included)."""
        scores = [t.verdict.score for t in group]
        self.parts.sampler.observe(group[0].problem, scores)
        if self.parts.mix.difficulty_controller is not None:
            self.parts.mix.difficulty_controller.update(group[0].task, scores)

    def critic_warmup(self, steps: int) -> None:
        """Value-model updates on the starting policy's rollouts before any policy update, so that GAE starts
        from a critic that predicts something (a zero-initialised head predicts a constant)."""
        parts, critic = self.parts, self.training.critic
        self.progress.start("critic warm-up", steps, 0)
        for k in range(steps):
            t0 = time.perf_counter()
            self.state.global_step += 1
            trajs = self.collect(k, parts.seed_step("critic_warmup", k)).trajectories
            record: dict = {"sequences": len(trajs)}
            if trajs:
                pad_id = parts.policy.tokenizer.pad_token_id
                batch = prepare_update(trajs, list(parts.mix.tasks), pad_id, parts.update_settings, critic)
                record.update(critic_update(critic, batch, parts.update_settings))
                record["reward"] = sum(t.reward for t in trajs) / len(trajs)
            record["step_time"] = time.perf_counter() - t0
            self.state.log("critic_warmup", k + 1, record)
            shown = {"value_loss": "value_loss", "explained_var": "value_explained_variance"}
            self.progress.update(k + 1, {k_: record.get(v, float("nan")) for k_, v in shown.items()})
