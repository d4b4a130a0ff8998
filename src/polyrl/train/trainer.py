"""The training pipeline: SFT warm start → held-out eval → multi-task RL → held-out eval.

``Trainer(config).run()`` is what ``polyrl train`` calls. Everything a user can get wrong is checked in
``__init__`` before any training starts; a run killed at any moment resumes from its last checkpoint with
``Trainer(config, resume=True)`` and, on CPU with a fixed seed, ends with the same weights.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from polyrl.algos import get_advantage_estimator, get_aggregation
from polyrl.curriculum import curriculum_metrics, make_difficulty_controller, make_sampler
from polyrl.errors import UserError
from polyrl.eval import evaluate_policy, format_comparison
from polyrl.policy import PromptBuilder, TransformersBackend, load_policy
from polyrl.rewards import RewardScorer
from polyrl.tasks.dataset import resolve_task_spec
from polyrl.train import rl, sft
from polyrl.train.checkpoint import latest_checkpoint, load_model_weights, load_training_state, save_checkpoint
from polyrl.train.config import TrainConfig, save_config
from polyrl.train.progress import StageProgress
from polyrl.train.run_dir import RunDir, atomic_write_text


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
        self.tasks = {spec.name: resolve_task_spec(spec, config.env) for spec in config.tasks}
        self.specs = {spec.name: spec for spec in config.tasks}
        for spec in config.tasks:
            space = self.tasks[spec.name].difficulty_space()
            space.resolve(spec.difficulty)
            if spec.eval_difficulty is not None:
                space.resolve(spec.eval_difficulty)
            if config.sft.difficulty is not None:
                space.resolve(config.sft.difficulty)
        self.sampler = make_sampler(config.sampler.name, list(self.tasks), config.sampler.options)
        self.difficulty_controller = make_difficulty_controller(config.difficulty_control, self.tasks, self.specs)
        self.reward_scorer = RewardScorer(config.reward, list(self.tasks), config.device)
        if config.rl.advantage != "gae":
            get_advantage_estimator(config.rl.advantage)
        elif config.rl.task_normalize:
            raise UserError(
                "rl.task_normalize applies to group advantages; with rl.advantage=gae the critic's advantages are normalized by rl.critic.normalize_advantages"
            )
        get_aggregation(config.rl.loss_aggregation)
        if config.device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"device {config.device!r} requested but CUDA is not available")
        if config.generation.engine == "vllm":
            if config.backend == "ray":
                raise UserError(
                    "generation.engine: vllm samples in the trainer process; with backend: ray the rollout workers generate with transformers"
                )
            if not config.device.startswith("cuda"):
                raise UserError(f"generation.engine: vllm needs a CUDA device (device=cuda), not {config.device!r}")
            from polyrl.policy.vllm_backend import require_vllm

            require_vllm()
        self.run_dir = RunDir(config.run_dir, tensorboard=config.tensorboard)
        self.run_dir.create(resume=resume)
        # -- the policy -------------------------------------------------------------------------------
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if config.threads:
            torch.set_num_threads(config.threads)
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
        if not resume:
            save_config(config, self.run_dir.config_file)

    # -- helpers ------------------------------------------------------------------------------------
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

    def _sync_backend(self) -> None:
        """Give the generation backend the current weights (a no-op for transformers, which shares them)."""
        self.backend.sync_weights(self.policy.model, self.policy_version)

    def _broadcast_weights(self) -> None:
        """The current weights to every generator of RL rollouts: the backend and, with Ray, the workers."""
        self._sync_backend()
        if self.rollout_pool is not None:
            self.rollout_pool.sync_weights(self.policy.model, self.policy_version)

    def _collect(self, step: int, rng: np.random.Generator):
        if self.rollout_pool is not None:
            from polyrl.distributed.rollouts import collect_rollouts_ray

            return collect_rollouts_ray(self, step, rng)
        return rl.collect_rollouts(self, step, rng)

    def _critic_warmup(self, steps: int) -> None:
        """Value-model updates on the starting policy's rollouts before any policy update, so that GAE starts
        from a critic that predicts something (a zero-initialised head predicts a constant)."""
        self.progress.start("critic warm-up", steps, 0)
        for k in range(steps):
            t0 = time.perf_counter()
            trajs, _ = self._collect(k, self._seed_step("critic_warmup", k))
            record = {"stage": "critic_warmup", "step": k + 1, "sequences": len(trajs)}
            if trajs:
                record.update(rl.critic_only_update(self, trajs))
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
        self.optimizer = torch.optim.AdamW(self.trainable_parameters(), lr=lr, weight_decay=weight_decay)

        def schedule(step: int) -> float:
            if step < warmup:
                return (step + 1) / (warmup + 1)
            if not cosine:
                return 1.0
            progress = (step - warmup) / max(1, total - warmup)
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)

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
            {
                "sampler": self.sampler.state_dict(),
                "bad_steps": self.bad_steps,
                "difficulty": self.difficulty_controller.state_dict() if self.difficulty_controller else {},
                "policy_version": self.policy_version,
            },
            self.config.keep_checkpoints,
            tensors={"critic": self.critic.state_dict()} if self.critic is not None else None,
        )

    def _restore(self, ckpt) -> None:
        tensors = load_training_state(ckpt, self.policy.model, self.optimizer, self.scheduler)
        if self.critic is not None and "critic" in tensors:
            self.critic.load_state_dict(tensors["critic"])
        self.sampler.load_state_dict(ckpt.state.get("sampler", {}))
        if self.difficulty_controller is not None:
            self.difficulty_controller.load_state_dict(ckpt.state.get("difficulty", {}))
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
        if ckpt is not None:
            self.run_dir.truncate_metrics(ckpt.stage, ckpt.step)
        else:
            self.run_dir.truncate_metrics("sft", -1)
        try:
            if ckpt is None or ckpt.stage == "sft":
                self.run_sft(ckpt)
            results = {"after_sft": self.evaluate("after_sft")}
            if self.config.rl.enabled and self.config.rl.steps:
                self.run_rl(ckpt if ckpt is not None and ckpt.stage == "rl" else None)
                self.policy.save(self.run_dir.model_dir("final_model"))
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
        self.progress.start("SFT", total, start)
        for step in range(start, total):
            rng = self._seed_step("sft", step)
            t0 = time.perf_counter()
            loss = sft.sft_step(self, sft.reference_batch(self, rng, cfg.batch_size))
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
        if total > start or ckpt is None:
            self._checkpoint("sft", total)
            self.policy.save(self.run_dir.model_dir("sft_model"))

    def _rejection_round(self, rnd: int) -> None:
        cfg = self.config.sft
        rng = self._seed_step("rft", rnd)
        self._sync_backend()
        data, pass_rate = sft.rejection_samples(self, rng)
        losses = []
        for _ in range(cfg.rejection_steps if data else 0):
            pick = rng.integers(len(data), size=min(cfg.batch_size, len(data)))
            loss = sft.sft_step(self, [data[i] for i in pick])
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

    def evaluate(self, name: str) -> dict[str, dict[str, float]]:
        path = self.run_dir.eval_file(name)
        if path.exists() and name == "after_sft":
            import json

            return json.loads(path.read_text())
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
        )
        self.run_dir.save_json(path, results)
        self.run_dir.log(
            {
                "stage": "eval",
                "step": self.step,
                "name": name,
                **{f"{m}/{t}": v for t, row in results.items() for m, v in row.items()},
            }
        )
        return results

    def run_rl(self, ckpt) -> None:
        cfg = self.config.rl
        self._make_optimizer(cfg.lr, cfg.warmup_steps, cfg.steps, cosine=False, weight_decay=cfg.weight_decay)
        if cfg.kl_coef > 0:
            self.reference = copy.deepcopy(self.policy.model).eval().requires_grad_(False)
            sft_dir = self.run_dir.model_dir("sft_model")
            if ckpt is not None and sft_dir.exists():
                load_model_weights(self.reference, sft_dir)
        if cfg.advantage == "gae":
            from polyrl.critic import Critic

            self.critic = Critic(cfg.critic, self.policy.model)
        start = 0
        if ckpt is not None:
            self._restore(ckpt)
            start = ckpt.step
        self._broadcast_weights()
        if self.critic is not None and start == 0 and cfg.critic.warmup_steps:
            self._critic_warmup(cfg.critic.warmup_steps)
        self.progress.start("RL", cfg.steps, start)
        for step in range(start, cfg.steps):
            self.step = step + 1
            rng = self._seed_step("rl", step)
            t0 = time.perf_counter()
            trajs, info = self._collect(step, rng)
            if not trajs:
                self.scheduler.step()
                update = {
                    "loss": float("nan"),
                    "grad_norm": float("nan"),
                    "skipped_updates": 0,
                    "zero_variance": [],
                    "seq_entropy": [],
                    "seq_kl": [],
                    "seq_clip": [],
                }
            else:
                update = rl.rl_update(self, trajs)
                if update["updates"] == 0:
                    pass  # every advantage was zero: nothing to learn from this batch
                elif update["skipped_updates"] == update["updates"]:
                    self._nonfinite("rl", step)
                else:
                    self.bad_steps = 0
                    self.policy_version += 1
                    self._broadcast_weights()
            metrics = rl.step_metrics(trajs, update, info, time.perf_counter() - t0)
            metrics["lr"] = self.scheduler.get_last_lr()[0]
            metrics.update(
                {
                    k: info[k]
                    for k in (
                        "staleness_mean",
                        "staleness_max",
                        "failed_groups",
                        "reruns",
                        "stale_reruns",
                        "task_errors",
                    )
                    if k in info
                }
            )
            metrics.update(curriculum_metrics(self.sampler, self.difficulty_controller))
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
