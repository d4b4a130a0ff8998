"""The training pipeline: SFT warm start → held-out eval → multi-task RL → held-out eval.

``Trainer(config).run()`` is what ``polyrl train`` calls. Everything a user can get wrong is checked in
``__init__`` before any training starts; a run killed at any moment resumes from its last checkpoint with
``Trainer(config, resume=True)`` and, on CPU with a fixed seed, ends with the same weights.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from polyrl.curriculum import curriculum_metrics, make_difficulty_controller, make_sampler
from polyrl.errors import UserError
from polyrl.eval import evaluate_policy, format_comparison
from polyrl.optim import make_optimizer
from polyrl.policy import PromptBuilder, TransformersBackend, load_policy
from polyrl.policy.threads import configure_torch
from polyrl.rewards import RewardScorer
from polyrl.rollout.collect import LocalSource, Sampling, collect_groups
from polyrl.rollout.selfplay import SelfPlay, SelfPlaySettings
from polyrl.run_dir import RunDir, atomic_write_text
from polyrl.tasks.answers import AnswerFormat
from polyrl.tasks.dataset import resolve_task_spec
from polyrl.train import sft
from polyrl.train.checkpoint import latest_checkpoint, load_model_weights, load_training_state, save_checkpoint
from polyrl.train.config import TrainConfig
from polyrl.train.learner import BaseModelReference, critic_update, policy_update
from polyrl.train.metrics import advantage_mass, step_metrics
from polyrl.train.progress import StageProgress
from polyrl.train.resume import save_run_config
from polyrl.train.update_batch import prepare_update


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. repeated non-finite losses); the last checkpoint is usable."""


def _step_seed(seed: int, stage: str, step: int) -> int:
    digest = hashlib.sha256(f"{seed}|{stage}|{step}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**63)


class Trainer:
    def __init__(self, config: TrainConfig, resume: bool = False):
        self.config = config
        self.resume = resume
        # -- everything a user can get wrong, before training starts --------------------------------
        config.verifier.apply()  # the isolated verifier pool's limits, before any task verifies anything
        answers = AnswerFormat(think_tags=config.prompt.think_tags) if config.prompt.think_tags else None
        self.tasks = {spec.name: resolve_task_spec(spec, config.env, answers) for spec in config.tasks}
        self.specs = {spec.name: spec for spec in config.tasks}
        for spec in config.tasks:
            space = self.tasks[spec.name].difficulty_space()
            space.resolve(spec.difficulty)
            if spec.eval_difficulty is not None:
                space.resolve(spec.eval_difficulty)
            if config.sft.difficulty is not None:
                space.resolve(config.sft.difficulty)
        # the proposer's prompts come from the self-play game, not from the sampler
        sampled = [n for n in self.tasks if not (config.selfplay.enabled and n == config.selfplay.proposer)]
        self.sampler = make_sampler(config.sampler.name, sampled, config.sampler.options)
        self.difficulty_controller = make_difficulty_controller(config.difficulty_control, self.tasks, self.specs)
        self.reward_scorer = RewardScorer(config.reward, list(self.tasks), config.device)
        if config.device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"device {config.device!r} requested but CUDA is not available")
        if config.generation.engine == "vllm":  # the config checked the device and the backend
            from polyrl.policy.vllm_backend import require_vllm

            require_vllm()
        self.run_dir = self._open_run_dir(resume)
        # -- the policy -------------------------------------------------------------------------------
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        configure_torch(config.threads, config.deterministic, config.device)
        torch.manual_seed(config.seed)
        self.policy = load_policy(config.model, seed=config.seed, device=config.device)
        self.prompts = PromptBuilder(self.policy.tokenizer, config.prompt)
        self.backend = self._make_backend()
        self.rollout_pool = None
        if config.backend == "ray":  # joins or starts Ray and checks its CPUs now, before any training
            from polyrl.distributed.pool import RolloutPool

            self.rollout_pool = RolloutPool(
                config.ray,
                model_config=config.model,
                seed=config.seed,
                prompt_config=config.prompt,
                reward_config=config.reward,
                max_episode_tokens=config.env.max_episode_tokens,
                tasks=self.tasks,
            )
        sampling = Sampling(
            config.rl.group_size,
            config.rl.max_new_tokens,
            config.rl.temperature,
            config.rl.top_p,
            config.env.max_episode_tokens,
            config.env.concurrency,
        )
        if self.rollout_pool is not None:
            from polyrl.distributed.pool import RaySource

            self.source = RaySource(self.rollout_pool, sampling)
        else:
            self.source = LocalSource(
                self.tasks, self.backend, self.prompts, sampling, config.reward, lambda: self.policy_version
            )
        self.selfplay = self._make_selfplay(sampling) if config.selfplay.enabled else None
        self.has_references = {n: self._has_reference(n) for n in self.tasks}
        if config.sft.enabled and config.sft.steps and not any(self.has_references.values()):
            raise UserError("sft is enabled but no task in the mix provides reference solutions")
        self.reference = None
        self.critic = None
        self.policy_version = 0
        self.step = 0
        self.bad_steps = 0
        self.optimizer = self.scheduler = None
        self.progress = StageProgress(config.progress)
        if self.run_dir.writes:
            self.config = save_run_config(config, self.run_dir, resume)

    # -- helpers ------------------------------------------------------------------------------------
    ranks = None
    """``polyrl.distributed.fsdp.Ranks`` when training across processes (``FSDPTrainer``); None in one."""

    def _open_run_dir(self, resume: bool) -> RunDir:
        run_dir = RunDir(self.config.run_dir, tensorboard=self.config.tensorboard)
        run_dir.create(resume=resume)
        return run_dir

    def _make_backend(self):
        gen = self.config.generation
        if gen.engine == "vllm":
            from polyrl.policy.vllm_backend import VLLMBackend

            return VLLMBackend(
                self.policy.model,
                self.policy.tokenizer,
                gpu_memory_utilization=gen.vllm_gpu_memory_utilization,
                max_model_len=gen.vllm_max_model_len,
                enforce_eager=gen.vllm_enforce_eager,
                dtype=gen.vllm_dtype,
                seed=self.config.seed,
            )
        return TransformersBackend(
            self.policy.model,
            self.policy.tokenizer,
            batch_size=gen.batch_size,
            shared_prefill=self.config.rl.share_prompts,
        )

    def _make_selfplay(self, sampling: Sampling) -> SelfPlay:
        """The self-play game: proposer groups and solver groups from two in-process sources over the policy."""
        sp = self.config.selfplay
        local = lambda s: LocalSource(
            self.tasks, self.backend, self.prompts, s, self.config.reward, lambda: self.policy_version
        )
        proposer = dataclasses.replace(
            sampling, group_size=sp.proposals, max_new_tokens=sp.max_new_tokens or sampling.max_new_tokens
        )
        solver = dataclasses.replace(sampling, group_size=sp.solver_group_size)
        settings = SelfPlaySettings(sp.proposer, sp.prompts, sp.reward, sp.invalid_reward)
        return SelfPlay(settings, self.tasks, local(proposer), local(solver))

    def _sync_backend(self) -> None:
        """Give the generation backend the current weights (a no-op for transformers, which shares them)."""
        self.backend.sync_weights(self.policy.model, self.policy_version)

    def _broadcast_weights(self) -> None:
        """The current weights to every generator of RL rollouts: the backend and, with Ray, the workers."""
        self._sync_backend()
        if self.rollout_pool is not None:
            self.rollout_pool.sync_weights(self.policy.model, self.policy_version)

    def _collect(self, step: int, rng: np.random.Generator):
        """Stage 1: the step's scored groups from the rollout source (in process or on Ray)."""
        cfg = self.config.rl
        self.sampler.set_step(step)

        def make_problems(n: int):
            return self.sampler.draw(n, rng, self.tasks, self.difficulty)

        collected = collect_groups(
            self.source,
            cfg.prompts_per_step,
            make_problems,
            self.reward_scorer.score,
            self._observe,
            cfg.dynamic_sampling,
            cfg.max_refills,
        )
        if self.selfplay is not None:  # the game's proposer and solver groups (not shown to the curriculum)
            game = self.selfplay.collect(rng, self.difficulty, self.reward_scorer.score, cfg.dynamic_sampling)
            collected = collected.merged(game)
        return collected

    def _observe(self, group) -> None:
        """The curriculum sees every generated group's verifier scores (dropped groups included)."""
        scores = [t.verdict.score for t in group]
        self.sampler.observe(group[0].problem, scores)
        if self.difficulty_controller is not None:
            self.difficulty_controller.update(group[0].task, scores)

    def _critic_warmup(self, steps: int) -> None:
        """Value-model updates on the starting policy's rollouts before any policy update, so that GAE starts
        from a critic that predicts something (a zero-initialised head predicts a constant)."""
        self.progress.start("critic warm-up", steps, 0)
        for k in range(steps):
            t0 = time.perf_counter()
            trajs = self._collect(k, self._seed_step("critic_warmup", k)).trajectories
            record = {"stage": "critic_warmup", "step": k + 1, "sequences": len(trajs)}
            if trajs:
                batch = prepare_update(
                    trajs, list(self.tasks), self.policy.tokenizer.pad_token_id, self.config.rl, self.critic
                )
                record.update(critic_update(self.critic, batch, self.config.rl))
                record["reward"] = sum(t.reward for t in trajs) / len(trajs)
            record["step_time"] = time.perf_counter() - t0
            self.run_dir.log(record)
            self.progress.update(
                k + 1,
                {
                    "value_loss": record.get("value_loss", float("nan")),
                    "explained_var": record.get("value_explained_variance", float("nan")),
                },
            )

    def _has_reference(self, name: str) -> bool:
        return self.tasks[name].generate(0, self.difficulty(name)).solution is not None

    def difficulty(self, name: str):
        """The training difficulty of ``name`` now: a difficulty controller's knob when one is configured."""
        if self.difficulty_controller is not None:
            return self.difficulty_controller.difficulty(name)
        return self.specs[name].difficulty

    def sft_difficulty(self, name: str):
        return self.config.sft.difficulty if self.config.sft.difficulty is not None else self.difficulty(name)

    def eval_tasks(self) -> dict[str, tuple[Any, Any]]:
        return {
            n: (t, self.specs[n].eval_difficulty if self.specs[n].eval_difficulty is not None else self.difficulty(n))
            for n, t in self.tasks.items()
        }

    def trainable_parameters(self):
        return [p for p in self.policy.model.parameters() if p.requires_grad]

    def _make_optimizer(self, lr: float, warmup: int, total: int, cosine: bool, weight_decay: float = 0.0) -> None:
        self.optimizer, self.scheduler = make_optimizer(
            self.trainable_parameters(), lr, warmup, total, cosine, weight_decay
        )

    def _seed_step(self, stage: str, step: int) -> np.random.Generator:
        s = _step_seed(self.config.seed, stage, step)
        torch.manual_seed(s)
        return np.random.default_rng(s)

    def _checkpoint(self, stage: str, step: int) -> None:
        save_checkpoint(
            self.run_dir.checkpoints,
            stage,
            step,
            self.policy.model,
            self.optimizer,
            self.scheduler,
            self._checkpoint_state(),
            self.config.keep_checkpoints,
            tensors={"critic": self.critic.state_dict()} if self.critic is not None else None,
        )

    def _checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint keeps besides tensors: the curriculum, counters, and how much was logged."""
        return {
            "sampler": self.sampler.state_dict(),
            "bad_steps": self.bad_steps,
            "difficulty": self.difficulty_controller.state_dict() if self.difficulty_controller else {},
            "policy_version": self.policy_version,
            "metrics_lines": self.run_dir.metrics_lines(),
            "selfplay": self.selfplay.state_dict() if self.selfplay is not None else {},
        }

    def _load_training_state(self, ckpt) -> dict[str, Any]:
        """Model, optimizer, scheduler and RNG states from ``ckpt``; the tensors saved with them."""
        return load_training_state(ckpt, self.policy.model, self.optimizer, self.scheduler)

    def _restore(self, ckpt) -> None:
        tensors = self._load_training_state(ckpt)
        if self.critic is not None and "critic" in tensors:
            self.critic.load_state_dict(tensors["critic"])
        self.sampler.load_state_dict(ckpt.state.get("sampler", {}))
        if self.difficulty_controller is not None:
            self.difficulty_controller.load_state_dict(ckpt.state.get("difficulty", {}))
        if self.selfplay is not None:
            self.selfplay.load_state_dict(ckpt.state.get("selfplay", {}))
        self.bad_steps = ckpt.state.get("bad_steps", 0)
        self.policy_version = ckpt.state.get("policy_version", 0)

    def _nonfinite(self, stage: str, step: int) -> None:
        self.bad_steps += 1
        if self.bad_steps >= self.config.rl.max_bad_steps:
            self._checkpoint(stage, step)
            raise TrainingError(
                f"{self.bad_steps} consecutive steps with non-finite loss or gradients at {stage} step {step}; "
                f"stopped. The last good weights are in {self.run_dir.checkpoints} (try a lower learning rate)"
            )

    # -- stages -------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        ckpt = latest_checkpoint(self.run_dir.checkpoints) if self.resume else None
        # everything logged after the checkpoint is redone below, and logged again exactly once
        if ckpt is None:
            self.run_dir.keep_metrics(0)
        elif "metrics_lines" in ckpt.state:
            self.run_dir.keep_metrics(ckpt.state["metrics_lines"])
        else:  # a checkpoint written before metrics_lines existed
            self.run_dir.truncate_metrics(ckpt.stage, ckpt.step)
        in_sft = ckpt is None or ckpt.stage == "sft"
        try:
            if in_sft:
                self.run_sft(ckpt)
            results = {"after_sft": self.evaluate("after_sft", log=in_sft)}
            if self.config.rl.enabled and self.config.rl.steps:
                self.run_rl(ckpt if not in_sft else None)
                self._save_model("final_model")
                results["after_rl"] = self.evaluate("after_rl")
        finally:
            self.progress.stop()
            self.run_dir.close()
            if self.rollout_pool is not None:
                self.rollout_pool.shutdown()
            if hasattr(self.backend, "close"):
                self.backend.close()
        if "after_rl" in results:
            table = format_comparison(results["after_sft"], results["after_rl"])
            if self.run_dir.writes:
                atomic_write_text(self.run_dir.path / "summary.md", f"# Held-out accuracy\n\n{table}\n")
            results["table"] = table
        return results

    def run_sft(self, ckpt) -> None:
        cfg = self.config.sft
        total = cfg.steps if cfg.enabled else 0
        self._make_optimizer(cfg.lr, cfg.warmup_steps, total, cosine=True)
        start = 0
        if ckpt is not None:
            self._restore(ckpt)
            start = ckpt.step
        self.step = start
        self.progress.start("SFT", total, start)
        for step in range(start, total):
            rng = self._seed_step("sft", step)
            t0 = time.perf_counter()
            loss = self._sft_step(
                sft.reference_batch(
                    self._reference_tasks(),
                    self.sft_difficulty,
                    self.prompts,
                    self.policy.tokenizer.eos_token_id,
                    rng,
                    cfg.batch_size,
                )
            )
            if loss is None:
                self._nonfinite("sft", step)
            else:
                self.bad_steps = 0
            self.step = step + 1
            rec = {
                "stage": "sft",
                "step": step + 1,
                "loss": loss if loss is not None else float("nan"),
                "lr": self.scheduler.get_last_lr()[0],
                "step_time": time.perf_counter() - t0,
            }
            self.run_dir.log(rec)
            self.progress.update(step + 1, {"loss": rec["loss"]})
            if (step + 1) % self.config.checkpoint_every == 0 and step + 1 < total:
                self._checkpoint("sft", step + 1)
        for rnd in range(cfg.rejection_sampling_rounds if total > start else 0):
            self._rejection_round(rnd)
        # the SFT model is saved before the stage's last checkpoint: a checkpoint that marks SFT complete
        # always has its sft_model/ beside it (and a resume re-saves one lost in between)
        if total > start or ckpt is None or not self.run_dir.model_dir("sft_model").exists():
            self._save_model("sft_model")
        if total > start or ckpt is None:
            self._checkpoint("sft", total)

    def _reference_model(self):
        """The frozen KL reference: the policy as it was when RL started. Under LoRA, the policy model itself
        (its log-probs are taken with the adapters disabled: the base model, no copy); otherwise a copy
        loaded from ``sft_model/``, the same in a fresh and a resumed run."""
        if hasattr(self.policy.model, "disable_adapter"):
            return BaseModelReference(self.policy.model)
        reference = copy.deepcopy(self.policy.model).eval().requires_grad_(False)
        load_model_weights(reference, self.run_dir.model_dir("sft_model"))
        return reference

    def _save_model(self, name: str) -> None:
        """Save the policy as a Hugging Face checkpoint in ``RUN_DIR/name``, atomically (temp dir + rename)."""
        final = self.run_dir.model_dir(name)
        tmp = final.with_name(f".{name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.policy.save(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)

    def _reference_tasks(self) -> dict:
        return {n: t for n, t in self.tasks.items() if self.has_references[n]}

    def _sft_step(self, sequences) -> float | None:
        loss = sft.sft_step(
            self.policy.model,
            self.optimizer,
            self.trainable_parameters(),
            self.policy.tokenizer.pad_token_id,
            sequences,
            self.config.sft.micro_batch_tokens,
        )
        if loss is not None:
            self.scheduler.step()
        return loss

    def _rejection_round(self, rnd: int) -> None:
        cfg = self.config.sft
        rng = self._seed_step("rft", rnd)
        self._sync_backend()
        sampling = {
            "max_new_tokens": self.config.rl.max_new_tokens,
            "reward": self.config.reward,
            "max_episode_tokens": self.config.env.max_episode_tokens,
            "temperature": self.config.rl.temperature,
        }
        data, pass_rate = sft.rejection_samples(
            self.tasks,
            self.sft_difficulty,
            self.backend,
            self.prompts,
            rng,
            cfg.rejection_problems,
            cfg.rejection_samples,
            sampling,
        )
        losses = []
        for _ in range(cfg.rejection_steps if data else 0):
            pick = rng.integers(len(data), size=min(cfg.batch_size, len(data)))
            loss = self._sft_step([data[i] for i in pick])
            if loss is not None:
                losses.append(loss)
        self.run_dir.log(
            {
                "stage": "sft",
                "step": cfg.steps,
                "rft_round": rnd,
                "rft_pass_rate": pass_rate,
                "rft_examples": len(data),
                "rft_loss": float(np.mean(losses)) if losses else float("nan"),
            }
        )

    def evaluate(self, name: str, log: bool = True) -> dict[str, dict[str, float]]:
        """Held-out results ``name`` (computed, or read back: the after-SFT evaluation is done once per run);
        logged as an ``eval`` record unless ``log`` is False (the record is already in the metrics)."""
        path = self.run_dir.eval_file(name)
        if path.exists() and name == "after_sft":
            results = json.loads(path.read_text())
        else:
            cfg = self.config.eval
            self.progress.stop()
            self._sync_backend()
            results = evaluate_policy(
                self.backend,
                self.prompts,
                self.eval_tasks(),
                cfg.problems_per_task,
                cfg.max_new_tokens or self.config.rl.max_new_tokens,
                cfg.pass_k,
                cfg.temperature,
                seed=self.config.seed,
                max_episode_tokens=self.config.env.max_episode_tokens,
                attempts=cfg.attempts,
            )
            self.run_dir.save_json(path, results)
        if log:
            record = {f"{m}/{t}": v for t, row in results.items() for m, v in row.items()}
            self.run_dir.log({"stage": "eval", "step": self.step, "name": name, **record})
        return results

    def rl_step(self, step: int, rng: np.random.Generator) -> dict[str, Any]:
        """One RL step, stage by stage (docs/architecture.md): collect scored groups → advantages and the
        rows to train on → the policy update → metrics. Returns the step's metrics."""
        cfg = self.config.rl
        t0 = time.perf_counter()
        collected = self._collect(step, rng)
        trajs = collected.trajectories
        batch = update = None
        if trajs:
            batch = prepare_update(trajs, list(self.tasks), self.policy.tokenizer.pad_token_id, cfg, self.critic)
            update = policy_update(
                self.policy.model,
                self.optimizer,
                batch,
                cfg,
                self.trainable_parameters(),
                reference=self.reference,
                critic=self.critic,
                tis_cap=self.config.ray.tis_cap if batch.behaviour_logprobs is not None else None,
                ranks=self.ranks,
            )
            if update.updates == 0:
                pass  # every advantage was zero: nothing to learn from this batch
            elif update.skipped_updates == update.updates:
                self._nonfinite("rl", step)
            else:
                self.bad_steps = 0
                self.policy_version += 1
                self._broadcast_weights()
        self.scheduler.step()
        elapsed = time.perf_counter() - t0
        metrics = step_metrics(trajs, collected, update, batch.zero_variance if batch else None, elapsed)
        if batch is not None:
            metrics.update(batch.critic_stats)
            metrics.update(advantage_mass(batch.advantages, batch.tokens.loss_mask, batch.task_ids, batch.task_names))
        metrics["lr"] = self.scheduler.get_last_lr()[0]
        metrics.update(curriculum_metrics(self.sampler, self.difficulty_controller))
        return metrics

    def run_rl(self, ckpt) -> None:
        cfg = self.config.rl
        self._make_optimizer(cfg.lr, cfg.warmup_steps, cfg.steps, cosine=False, weight_decay=cfg.weight_decay)
        if cfg.kl_coef > 0:
            self.reference = self._reference_model()
        if cfg.advantage == "gae":
            from polyrl.critic import Critic

            self.critic = Critic(cfg.critic, self.policy.model)
        start = 0
        if ckpt is not None:
            self._restore(ckpt)
            start = ckpt.step
        self.step = start  # a run resumed from its last RL checkpoint logs its final eval at that step
        self._broadcast_weights()
        if self.critic is not None and start == 0 and cfg.critic.warmup_steps:
            self._critic_warmup(cfg.critic.warmup_steps)
        self.progress.start("RL", cfg.steps, start)
        for step in range(start, cfg.steps):
            self.step = step + 1
            metrics = self.rl_step(step, self._seed_step("rl", step))
            self.run_dir.log({"stage": "rl", "step": step + 1, **metrics})
            self.progress.update(step + 1, {k: metrics[k] for k in ("reward", "accuracy", "entropy") if k in metrics})
            if self.config.eval.every and (step + 1) % self.config.eval.every == 0 and step + 1 < cfg.steps:
                self.evaluate(f"rl_step_{step + 1:06d}")
                self.progress.start("RL", cfg.steps, step + 1)
            if (step + 1) % self.config.checkpoint_every == 0 or step + 1 == cfg.steps:
                self._checkpoint("rl", step + 1)


def train(config: TrainConfig, resume: bool = False) -> dict[str, Any]:
    """Run the whole pipeline described by ``config``; returns the held-out results."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Trainer(config, resume=resume).run()


def resume_config(run_dir: str | Path) -> TrainConfig:
    from polyrl.train.config import load_config

    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise UserError(f"{str(run_dir)!r} is not a polyrl run directory (no config.yaml)")
    return load_config(path)
