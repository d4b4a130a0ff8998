"""Building a run from its config: every part the stages use, checked before any training starts.

``build_run(config, resume, placement)`` returns :class:`RunParts`: the resolved tasks, the curriculum
(sampler, difficulty controller), the reward scorer, the run directory, the policy, its prompts and
generation backend, the rollout source (in process, or Ray workers), the self-play game, and the update
settings. Everything a user can get wrong raises a UserError here.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from polyrl.curriculum import make_difficulty_controller, make_sampler
from polyrl.curriculum.difficulty import DifficultyController
from polyrl.curriculum.samplers import TaskSampler
from polyrl.errors import UserError
from polyrl.forward.decoder import picture_forward_of
from polyrl.learner import UpdateSettings
from polyrl.policy import PromptBuilder, load_policy
from polyrl.policy.backends import check_installed, make_backend
from polyrl.policy.generation import GenerationBackend
from polyrl.policy.loading import Policy
from polyrl.policy.threads import configure_torch
from polyrl.rewards import RewardScorer
from polyrl.rollout.collect import GroupSource, LocalSource, Sampling
from polyrl.rollout.selfplay import SelfPlay, SelfPlaySettings
from polyrl.run_dir import RunDir
from polyrl.tasks import Task, resolve_task
from polyrl.tasks.answers import AnswerFormat
from polyrl.tasks.base import check_modalities
from polyrl.trackers import open_trackers
from polyrl.train.config import TaskSpec, TrainConfig
from polyrl.train.lengths import check_run_lengths
from polyrl.train.placement import LocalPlacement
from polyrl.train.state import PolicyVersion

if TYPE_CHECKING:  # types only: Ray and torch.distributed load when a run uses them
    from polyrl.distributed.fsdp import RankScorer
    from polyrl.distributed.pool import RolloutPool


def step_seed(seed: int, stage: str, step: int) -> int:
    """The seed of ``stage``'s step ``step`` in a run seeded ``seed``: every random choice of the step flows
    from it, so a resumed run replays the same step."""
    digest = hashlib.sha256(f"{seed}|{stage}|{step}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**63)


@dataclass(frozen=True)
class TaskMix:
    """The run's tasks and how hard each is asked: what the curriculum, SFT, evaluation and the length check read
    of the mix (built once, before the policy)."""

    tasks: dict[str, Task]
    """Task name → resolved task (the mix, in config order)."""
    specs: dict[str, TaskSpec]
    """Task name → its ``TaskSpec`` from the config."""
    difficulty_controller: DifficultyController | None
    difficulty: Callable[[str], object]
    """How hard a task is asked for training now: the difficulty controller's knob (its ``difficulty``, which holds
    the configured difficulty of every task it leaves alone), or without one the configured difficulty."""
    sft_override: object
    """``sft.difficulty``: SFT's difficulty for every task, or None for each task's training difficulty."""
    has_references: dict[str, bool]
    """Task name → whether it provides reference solutions (SFT's data)."""

    def sft_difficulty(self, name: str):
        return self.sft_override if self.sft_override is not None else self.difficulty(name)

    def eval_tasks(self) -> dict[str, tuple[Task, object]]:
        """Task name → (task, held-out difficulty)."""
        return {
            n: (t, self.specs[n].eval_difficulty if self.specs[n].eval_difficulty is not None else self.difficulty(n))
            for n, t in self.tasks.items()
        }

    def reference_tasks(self) -> dict[str, Task]:
        """The tasks that provide reference solutions (SFT's data)."""
        return {n: t for n, t in self.tasks.items() if self.has_references[n]}


@dataclass(frozen=True)
class RunParts:
    """What a run is made of, built complete by :func:`build_run` (nothing is filled in afterwards) and shared by
    the stages."""

    config: TrainConfig
    mix: TaskMix
    sampler: TaskSampler
    reward_scorer: RewardScorer | RankScorer
    """The batched reward terms (one process), or their split across ranks (FSDP)."""
    run_dir: RunDir
    policy: Policy
    prompts: PromptBuilder
    backend: GenerationBackend
    source: GroupSource
    """Where RL groups come from: ``LocalSource``, ``RaySource``, or either split across ranks (``RankSource``)."""
    rollout_pool: RolloutPool | None
    """The Ray workers with ``backend: ray``; None in process."""
    selfplay: SelfPlay | None
    update_settings: UpdateSettings
    policy_version: PolicyVersion
    """The current policy version, which the run's state counts (rollouts are tagged with it)."""

    def seed_step(self, stage: str, step: int) -> np.random.Generator:
        """Seed torch for ``stage``/``step`` and return the step's numpy generator (resumes replay it)."""
        s = step_seed(self.config.seed, stage, step)
        torch.manual_seed(s)
        return np.random.default_rng(s)

    def sampling(self) -> Sampling:
        """How RL rollouts sample (one home: the config's rl and env sections)."""
        return Sampling.of(self.config.rl, self.config.env)


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


def _load_policy(config: TrainConfig, placement) -> tuple[Policy, PromptBuilder, GenerationBackend]:
    """The policy on the placement's device, its prompts and its generation backend (over the weights the placement
    gives it)."""
    from transformers.utils import logging as hf_logging

    device = placement.device
    hf_logging.disable_progress_bar()
    configure_torch(config.threads, config.deterministic, device, config.keep_freed_memory)
    torch.manual_seed(config.seed)
    policy = load_policy(config.model, seed=config.seed, device=device)
    _check_vision_placement(config, placement, policy)
    prompts = PromptBuilder(policy.tokenizer, config.prompt, policy.image_input)
    tokenizer, share = policy.tokenizer, config.rl.share_prompts
    backend = placement.make_backend(
        policy, lambda model: make_backend(config.generation, model, tokenizer, config.seed, share, device)
    )
    return policy, prompts, backend


def _check_vision_placement(config: TrainConfig, placement, policy: Policy) -> None:
    """A Hugging Face vision-language policy trains in one process and generates with transformers: what it does not
    run is refused in one line."""
    if picture_forward_of(policy.model) is None:
        return
    if not isinstance(placement, LocalPlacement):  # FSDPPlacement (--nproc)
        raise UserError(
            f"--nproc: {config.model.path} is a Hugging Face vision-language model, which trains in one process only"
        )
    if config.generation.engine != "transformers":
        raise UserError(
            f"generation.engine {config.generation.engine}: {config.model.path} is a Hugging Face vision-language "
            "model, which generates with transformers only"
        )


def _rollouts(config: TrainConfig, tasks: dict, local) -> tuple[GroupSource, RolloutPool | None, SelfPlay | None]:
    """Where RL groups come from — Ray workers (joined or started now, their CPUs checked) or this process
    (``local(sampling)`` makes an in-process source) — and the self-play game."""
    sampling, pool = Sampling.of(config.rl, config.env), None
    if config.backend == "ray":
        from polyrl.distributed.pool import RaySource, RolloutPool

        pool = RolloutPool(
            config.ray,
            model_config=config.model,
            seed=config.seed,
            prompt_config=config.prompt,
            tasks=tasks,
            backend_options={"batch_size": config.generation.batch_size, "shared_prefill": config.rl.share_prompts},
        )
        source = RaySource(pool, sampling)
    else:
        source = local(sampling)
    selfplay = _selfplay(config, tasks, local, sampling) if config.selfplay.enabled else None
    return source, pool, selfplay


def _selfplay(config: TrainConfig, tasks: dict, local, sampling: Sampling) -> SelfPlay:
    """The self-play game: proposer groups and solver groups from two in-process sources over the policy."""
    sp = config.selfplay
    proposer = dataclasses.replace(
        sampling, group_size=sp.proposals, max_new_tokens=sp.max_new_tokens or sampling.max_new_tokens
    )
    solver = dataclasses.replace(sampling, group_size=sp.solver_group_size)
    settings = SelfPlaySettings(sp.proposer, sp.prompts, sp.reward, sp.invalid_reward)
    return SelfPlay(settings, tasks, local(proposer), local(solver))


def build_run(config: TrainConfig, resume: bool, placement, policy_version: PolicyVersion) -> RunParts:
    """Every part of the run ``config`` describes, in order, each user error a one-line UserError before training
    starts; ``policy_version()`` reads the run's current version."""
    config.verifier.apply()  # the isolated verifier pool's limits, before any task verifies anything
    tasks, specs = _resolve_tasks(config)
    sampler, controller = _curriculum(config, tasks, specs)
    scorer = RewardScorer(config.reward, list(tasks), str(placement.device))
    check_installed(config.generation)  # the config checked the device and the rollout placement
    trackers = lambda: open_trackers(config.logging, config.run_dir, config.model_dump(mode="json"))
    run_dir = placement.open_run_dir(config.run_dir, trackers, resume)
    policy, prompts, backend = _load_policy(config, placement)
    check_modalities(tasks, policy.modalities, config.model.path)
    configured = {n: spec.difficulty for n, spec in specs.items()}
    difficulty = controller.difficulty if controller is not None else configured.__getitem__
    partial = TaskMix(tasks, specs, controller, difficulty, config.sft.difficulty, {})
    references = {n: tasks[n].generate(0, partial.difficulty(n)).solution is not None for n in tasks}
    mix = dataclasses.replace(partial, has_references=references)
    if config.sft.enabled and config.sft.steps and not any(references.values()):
        raise UserError("sft is enabled but no task in the mix provides reference solutions")
    check_run_lengths(config, policy, prompts, mix)
    local = lambda sampling: LocalSource(tasks, backend, prompts, sampling, policy_version)
    source, pool, selfplay = _rollouts(config, tasks, local)
    source, scorer = placement.rollouts(source, scorer)
    return RunParts(
        config=config,
        mix=mix,
        sampler=sampler,
        reward_scorer=scorer,
        run_dir=run_dir,
        policy=policy,
        prompts=prompts,
        backend=backend,
        source=source,
        rollout_pool=pool,
        selfplay=selfplay,
        update_settings=UpdateSettings.from_config(config.rl, tis_cap=config.ray.tis_cap),
        policy_version=policy_version,
    )
