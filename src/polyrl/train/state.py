"""A run's state: what is trained (:class:`Training`) and the one state dict a checkpoint keeps (:class:`RunState`).

``RunState.state_dict()`` is everything besides tensors that a resumed run needs to continue exactly: the
curriculum (sampler, difficulty controller), the self-play game, the counters, and how many metrics
lines were logged. ``RunState.checkpoint`` writes it with the tensors (through the placement: one
process, or every rank its shard); ``RunState.restore`` reads both back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polyrl.algos import uses_critic
from polyrl.optim import make_optimizer
from polyrl.policy.model_files import first_nonfinite
from polyrl.train.checkpoint import Checkpoint


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. repeated non-finite losses); the last checkpoint is usable."""


@dataclass
class Training:
    """What the optimizer trains: the policy model, its optimizer and schedule, and the critic (GAE)."""

    model: Any
    optimizer: Any = None
    scheduler: Any = None
    critic: Any = None

    def parameters(self) -> list:
        """The trainable parameters (all of them, or the LoRA adapters)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def make_optimizer(self, lr: float, warmup: int, total: int, cosine: bool, weight_decay: float) -> None:
        """A fresh optimizer and schedule for a stage."""
        self.optimizer, self.scheduler = make_optimizer(self.parameters(), lr, warmup, total, cosine, weight_decay)

    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]


class PolicyVersion:
    """The policy's version: its optimizer updates so far in RL. The run's state counts it (and checkpoints it); the
    rollout sources call it to tag each trajectory with the version of the weights that sampled it."""

    def __init__(self, value: int = 0):
        self.value = value

    def __call__(self) -> int:
        return self.value


class RunState:
    """The counters and stateful parts of a run, saved and restored as one."""

    def __init__(self, parts, training: Training, placement):
        self.parts, self.training, self.placement = parts, training, placement
        self.step = 0
        """The stage's step count so far (evaluations are logged at it)."""
        self.global_step = 0
        """Training steps so far across the stages, in the order they ran: SFT's, then the critic's warm-up, then
        RL's. Every metrics record carries it, and every tracker plots against it, so that the stages (and the
        evaluations between them) line up on one axis."""
        self.bad_steps = 0
        """Consecutive steps with a non-finite loss."""

    @property
    def policy_version(self) -> int:
        """Policy updates so far in RL (rollouts are tagged with it: ``parts.policy_version``)."""
        return self.parts.policy_version.value

    @policy_version.setter
    def policy_version(self, value: int) -> None:
        self.parts.policy_version.value = value

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps besides tensors: the curriculum, counters, and how much was logged."""
        parts = self.parts
        return {
            "sampler": parts.sampler.state_dict(),
            "bad_steps": self.bad_steps,
            "difficulty": parts.mix.difficulty_controller.state_dict() if parts.mix.difficulty_controller else {},
            "policy_version": self.policy_version,
            "global_step": self.global_step,
            "metrics_lines": parts.run_dir.metrics_lines(),
            "selfplay": parts.selfplay.state_dict() if parts.selfplay is not None else {},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        parts = self.parts
        parts.sampler.load_state_dict(state.get("sampler", {}))
        if parts.mix.difficulty_controller is not None:
            parts.mix.difficulty_controller.load_state_dict(state.get("difficulty", {}))
        if parts.selfplay is not None:
            parts.selfplay.load_state_dict(state.get("selfplay", {}))
        self.bad_steps = state.get("bad_steps", 0)
        self.policy_version = state.get("policy_version", 0)
        self.global_step = state.get("global_step", self.global_step)

    def require_finite(self, what: str) -> None:
        """TrainingError unless every weight is finite, before ``what`` is written: a checkpoint or model of NaN
        weights would replace good ones (old checkpoints are pruned), and a run ended with them exited 0."""
        bad = first_nonfinite(self.training.model.named_parameters())
        if bad is not None:
            name, count, total = bad
            raise TrainingError(
                f"the weights became NaN or infinite ({count} of {total} values of {name}), so {what} was not "
                f"written; any checkpoints in {self.parts.run_dir.checkpoints} hold earlier, finite weights "
                "(try a lower learning rate)"
            )

    def checkpoint(self, stage: str, step: int) -> None:
        """Tensors and :meth:`state_dict` as checkpoint ``stage``/``step`` (atomic; old ones pruned)."""
        self.require_finite(f"checkpoint {stage}/{step}")
        keep = self.parts.config.keep_checkpoints
        self.placement.save_checkpoint(
            self.parts.run_dir.checkpoints, stage, step, self.training, self.state_dict(), keep
        )

    def restore(self, ckpt: Checkpoint) -> None:
        """Tensors (model, optimizer, scheduler, RNGs, critic) and state from ``ckpt``."""
        tensors = self.placement.load_checkpoint(ckpt, self.training)
        if self.training.critic is not None and "critic" in tensors:
            self.training.critic.load_state_dict(tensors["critic"])
        # a checkpoint of an earlier version has no global step: the one its stage and step imply
        self.global_step = ckpt.step + (self.steps_before_rl() if ckpt.stage == "rl" else 0)
        self.load_state_dict(ckpt.state)

    def steps_before_rl(self) -> int:
        """The global steps a run takes before its first RL step: SFT's and the critic's warm-up."""
        config = self.parts.config
        warmup = config.rl.critic.warmup_steps if uses_critic(config.rl.advantage) else 0
        return (config.sft.steps if config.sft.enabled else 0) + warmup

    def sync_backend(self) -> None:
        """Give the generation backend the current weights (through the placement), tagged with their version."""
        self.placement.sync_backend(self.parts.backend, self.training.model, self.policy_version)

    def log(self, stage: str, step: int, record: dict[str, Any]) -> None:
        """One metrics record of ``stage`` at its own ``step``, stamped with the run's :attr:`global_step`."""
        self.parts.run_dir.log({"stage": stage, "step": step, "global_step": self.global_step, **record})

    def step_done(self, finite: bool, stage: str, step: int) -> None:
        """Count a step whose loss was (not) finite; too many bad ones in a row checkpoint and stop the run."""
        if finite:
            self.bad_steps = 0
            return
        self.bad_steps += 1
        if self.bad_steps >= self.parts.config.rl.max_bad_steps:
            self.checkpoint(stage, step)
            raise TrainingError(
                f"{self.bad_steps} consecutive steps with non-finite loss or gradients at {stage} step {step}; "
                f"stopped. The last good weights are in {self.parts.run_dir.checkpoints} (try a lower learning rate)"
            )
