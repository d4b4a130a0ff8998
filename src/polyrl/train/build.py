"""Building a run from its config: every part the stages use, checked before any training starts.

``build_run(config, resume, placement)`` returns :class:`RunParts`: the resolved tasks, the curriculum
(sampler, difficulty controller), the reward scorer, the run directory, the policy, its prompts and
generation backend, the rollout source (in process, or Ray workers), the self-play game, and the update
settings. Everything a user can get wrong raises a UserError here.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from polyrl.curriculum import make_difficulty_controller, make_sampler
from polyrl.errors import UserError
from polyrl.learner import UpdateSettings
from polyrl.policy import PromptBuilder, load_policy
from polyrl.policy.backends import check_installed, make_backend
from polyrl.policy.threads import configure_torch
from polyrl.rewards import RewardScorer
from polyrl.rollout.collect import LocalSource, Sampling
from polyrl.rollout.selfplay import SelfPlay, SelfPlaySettings
from polyrl.run_dir import RunDir
from polyrl.tasks import resolve_task
from polyrl.tasks.answers import AnswerFormat
from polyrl.trackers import open_trackers
from polyrl.train.config import TrainConfig
from polyrl.train.lengths import check_run_lengths


def step_seed(seed: int, stage: str, step: int) -> int:
    """The seed of ``stage``'s step ``step`` in a run seeded ``seed``: every random choice of the step flows
    from it, so a resumed run replays the same step."""
    digest = hashlib.sha256(f"{seed}|{stage}|{step}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**63)


@dataclass
class RunParts:
    """What a run is made of (built once; the stages share it)."""

    config: TrainConfig
    tasks: dict[str, Any]
    """Task name → resolved task (the mix, in config order)."""
    specs: dict[str, Any]
    """Task name → its ``TaskSpec``."""
    sampler: Any
    difficulty_controller: Any
    reward_scorer: Any
    run_dir: RunDir
    policy: Any = None
    prompts: PromptBuilder | None = None
    backend: Any = None
    rollout_pool: Any = None
    """``polyrl.distributed.pool.RolloutPool`` with ``backend: ray``; None in process."""
    source: Any = None
    """Where RL groups come from: ``LocalSource`` or ``RaySource``."""
    selfplay: SelfPlay | None = None
    has_references: dict[str, bool] = dataclasses.field(default_factory=dict)
    update_settings: UpdateSettings | None = None
    policy_version: Any = None
    """``() -> int``: the current policy version (rollouts are tagged with it)."""

    def difficulty(self, name: str):
        """The training difficulty of ``name`` now: a difficulty controller's knob when one is configured."""
        if self.difficulty_controller is not None:
            return self.difficulty_controller.difficulty(name)
        return self.specs[name].difficulty

    def sft_difficulty(self, name: str):
        sft_difficulty = self.config.sft.difficulty
        return sft_difficulty if sft_difficulty is not None else self.difficulty(name)

    def eval_tasks(self) -> dict[str, tuple[Any, Any]]:
        """Task name → (task, held-out difficulty)."""
        return {
            n: (t, self.specs[n].eval_difficulty if self.specs[n].eval_difficulty is not None else self.difficulty(n))
            for n, t in self.tasks.items()
        }

    def reference_tasks(self) -> dict:
        """The tasks that provide reference solutions (SFT's data)."""
        return {n: t for n, t in self.tasks.items() if self.has_references[n]}

    def seed_step(self, stage: str, step: int) -> np.random.Generator:
        """Seed torch for ``stage``/``step`` and return the step's numpy generator (resumes replay it)."""
        s = step_seed(self.config.seed, stage, step)
        torch.manual_seed(s)
        return np.random.default_rng(s)

    def sampling(self) -> Sampling:
        """How RL rollouts sample (one home: the config's rl and env sections)."""
        cfg, env = self.config.rl, self.config.env
        return Sampling(
            cfg.group_size, cfg.max_new_tokens, cfg.temperature, cfg.top_p, env.max_episode_tokens, env.concurrency
        )


def _resolve_tasks(config: TrainConfig) -> tuple[dict, dict]:
    """The mix's tasks, each difficulty they will be asked for checked against the task's space."""
    answers = AnswerFormat(think_tags=config.prompt.think_tags) if config.prompt.think_tags else None
    tasks = {
        spec.name: resolve_task(
            spec.name, answer_format=answers, env=config.env, harness=spec.harness, dataset=spec.dataset
        )
        for spec in config.tasks
    }
    for spec in config.tasks:
        space = tasks[spec.name].difficulty_space()
        space.resolve(spec.difficulty)
        if spec.eval_difficulty is not None:
            space.resolve(spec.eval_difficulty)
        if config.sft.difficulty is not None:
            space.resolve(config.sft.difficulty)
    return tasks, {spec.name: spec for spec in config.tasks}


def _curriculum(config: TrainConfig, tasks: dict, specs: dict):
    # the proposer's prompts come from the self-play game, not from the sampler
    sampled = [n for n in tasks if not (config.selfplay.enabled and n == config.selfplay.proposer)]
    sampler = make_sampler(config.sampler.name, sampled, config.sampler.options)
    return sampler, make_difficulty_controller(config.difficulty_control, tasks, specs)


def _load_policy(parts: RunParts, placement) -> None:
    """The policy, its prompts and its generation backend (over the weights the placement gives it)."""
    from transformers.utils import logging as hf_logging

    config, device = parts.config, placement.device
    hf_logging.disable_progress_bar()
    configure_torch(config.threads, config.deterministic, device, config.keep_freed_memory)
    torch.manual_seed(config.seed)
    parts.policy = load_policy(config.model, seed=config.seed, device=device)
    parts.prompts = PromptBuilder(parts.policy.tokenizer, config.prompt)
    tokenizer, share = parts.policy.tokenizer, config.rl.share_prompts
    parts.backend = placement.make_backend(
        parts.policy, lambda model: make_backend(config.generation, model, tokenizer, config.seed, share, device)
    )


def _local_source(parts: RunParts, sampling: Sampling) -> LocalSource:
    return LocalSource(parts.tasks, parts.backend, parts.prompts, sampling, parts.policy_version)


def _rollouts(parts: RunParts) -> None:
    """Where RL groups come from: Ray workers (joined or started now, their CPUs checked) or this process."""
    config, sampling = parts.config, parts.sampling()
    if config.backend == "ray":
        from polyrl.distributed.pool import RaySource, RolloutPool

        parts.rollout_pool = RolloutPool(
            config.ray,
            model_config=config.model,
            seed=config.seed,
            prompt_config=config.prompt,
            tasks=parts.tasks,
            backend_options={"batch_size": config.generation.batch_size, "shared_prefill": config.rl.share_prompts},
        )
        parts.source = RaySource(parts.rollout_pool, sampling)
    else:
        parts.source = _local_source(parts, sampling)
    if config.selfplay.enabled:
        parts.selfplay = _selfplay(parts, sampling)


def _selfplay(parts: RunParts, sampling: Sampling) -> SelfPlay:
    """The self-play game: proposer groups and solver groups from two in-process sources over the policy."""
    sp = parts.config.selfplay
    proposer = dataclasses.replace(
        sampling, group_size=sp.proposals, max_new_tokens=sp.max_new_tokens or sampling.max_new_tokens
    )
    solver = dataclasses.replace(sampling, group_size=sp.solver_group_size)
    settings = SelfPlaySettings(sp.proposer, sp.prompts, sp.reward, sp.invalid_reward)
    return SelfPlay(settings, parts.tasks, _local_source(parts, proposer), _local_source(parts, solver))


def build_run(config: TrainConfig, resume: bool, placement, policy_version) -> RunParts:
    """Every part of the run ``config`` describes; ``policy_version()`` reads the run's current version."""
    config.verifier.apply()  # the isolated verifier pool's limits, before any task verifies anything
    tasks, specs = _resolve_tasks(config)
    sampler, controller = _curriculum(config, tasks, specs)
    scorer = RewardScorer(config.reward, list(tasks), str(placement.device))
    check_installed(config.generation)  # the config checked the device and the rollout placement
    trackers = lambda: open_trackers(config.logging, config.run_dir, config.model_dump(mode="json"))
    run_dir = placement.open_run_dir(config.run_dir, trackers, resume)
    parts = RunParts(config, tasks, specs, sampler, controller, scorer, run_dir, policy_version=policy_version)
    _load_policy(parts, placement)
    parts.has_references = {n: tasks[n].generate(0, parts.difficulty(n)).solution is not None for n in tasks}
    if config.sft.enabled and config.sft.steps and not any(parts.has_references.values()):
        raise UserError("sft is enabled but no task in the mix provides reference solutions")
    check_run_lengths(parts)
    _rollouts(parts)
    parts.source, parts.reward_scorer = placement.rollouts(parts.source, parts.reward_scorer)
    parts.update_settings = UpdateSettings.from_config(config.rl, tis_cap=config.ray.tis_cap)
    return parts
