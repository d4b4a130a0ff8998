"""The training config: one YAML file, validated by pydantic; every field has a default and a docstring.

``polyrl train --config FILE key=value …`` loads the file, applies dotted overrides
(``rl.steps=50``, ``tasks=[addition,sort_digits]``), validates, and saves the resolved config in the run
directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from polyrl.curriculum import SAMPLERS
from polyrl.device import DEFAULT_DEVICE, check_device_spec, device_kind
from polyrl.distributed.ray_config import RayConfig
from polyrl.envs.env_registry import ENV_PREFIX, EnvConfig
from polyrl.envs.retry import retried_task_name
from polyrl.errors import UserError
from polyrl.forward.logprobs import DEFAULT_TEMPERATURE
from polyrl.optim import MAX_LR
from polyrl.policy.backends import GenerationConfig, check_engine
from polyrl.policy.loading import TINY, ModelConfig
from polyrl.policy.prompts import PromptConfig
from polyrl.policy.threads import check_threads
from polyrl.registry import registered
from polyrl.rewards import RewardConfig
from polyrl.rollout.harness.task import HarnessSpec
from polyrl.rollout.selfplay import LEARNABILITY
from polyrl.run_dir import ResumeRecord, atomic_write_text
from polyrl.tasks.base import DEFAULT_DIFFICULTY
from polyrl.tasks.dataset import DatasetSpec, fold_dataset_fields
from polyrl.tasks.isolation import VerifierConfig
from polyrl.trackers import LoggingConfig
from polyrl.train.config_fields import Strict, first_bool_number, first_nonfinite_field
from polyrl.train.lengths import check_budgets, response_budgets
from polyrl.train.rl_config import MOVED_OBJECTIVE_KEYS, RLConfig
from polyrl.yaml_files import DuplicateKeyError, describe, read_yaml, safe_load

MAX_SEED = 2**63 - 1
"""The largest run seed: torch's generators take a signed or unsigned 64-bit integer, numpy's any one >= 0."""

__all__ = [
    "DifficultyControlConfig",
    "EvalConfig",
    "GenerationConfig",
    "RLConfig",
    "SFTConfig",
    "SamplerConfig",
    "SelfPlayConfig",
    "TaskSpec",
    "TrainConfig",
    "load_config",
    "parse_overrides",
    "save_config",
    "upgrade_saved",
]


class TaskSpec(Strict):
    """One task of the training mix."""

    name: str = Field(description="Registered task name (see `polyrl tasks list`), or rg/<dataset>.")
    difficulty: float | str | dict[str, Any] = Field(
        DEFAULT_DIFFICULTY, description="Training difficulty: knob in [0, 1], preset, or parameters."
    )
    eval_difficulty: float | str | dict[str, Any] | None = Field(
        None, description="Held-out difficulty (default: the training one)."
    )
    dataset: DatasetSpec | None = Field(
        None, description="Rows of a file or hub dataset served as task `name` (see docs/datasets.md)."
    )
    harness: HarnessSpec | None = Field(
        None,
        description="Play each episode with your agent function through polyrl's OpenAI-compatible endpoint: 'module:function' or a mapping (see docs/environments.md).",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value):
        value = {"name": value} if isinstance(value, str) else value
        return fold_dataset_fields(value, set(cls.model_fields))


class SamplerConfig(Strict):
    """Which task each prompt comes from."""

    name: str = Field("uniform", description="Registered sampler name (uniform, weighted, …).")
    options: dict[str, Any] = Field(default_factory=dict, description="Keyword options for the sampler.")

    _name = field_validator("name")(registered(SAMPLERS.lookup))


class DifficultyControlConfig(Strict):
    """Per-task difficulty control: move each task's knob to keep its pass rate in a target band."""

    enabled: bool = Field(False, description="Move the training difficulty knob of each task during RL.")
    tasks: list[str] | None = Field(None, description="Tasks to control (default: every task of the mix).")
    target_low: float = Field(0.4, ge=0, le=1, description="Lower the knob when a task's pass rate falls below this.")
    target_high: float = Field(0.8, ge=0, le=1, description="Raise the knob when a task's pass rate rises above this.")
    step_size: float = Field(0.05, gt=0, le=1, description="Knob change per decision.")
    window: int = Field(
        32, ge=1, description="Completions of a task per decision (its pass rate is measured over them)."
    )
    min_difficulty: float = Field(0.0, ge=0, le=1, description="Lowest knob the controller may set.")
    max_difficulty: float = Field(1.0, ge=0, le=1, description="Highest knob the controller may set.")

    @model_validator(mode="after")
    def _ordered(self):
        if self.target_low > self.target_high:
            raise ValueError(f"target_low {self.target_low} is above target_high {self.target_high}")
        if self.min_difficulty > self.max_difficulty:
            raise ValueError(f"min_difficulty {self.min_difficulty} is above max_difficulty {self.max_difficulty}")
        return self


class SFTConfig(Strict):
    """The SFT stage (before RL): supervised warm start on the generators' reference solutions."""

    enabled: bool = Field(True, description="Run the SFT warm start before RL.")
    steps: int = Field(600, ge=0, description="Optimizer steps.")
    batch_size: int = Field(64, ge=1, description="Examples per step.")
    lr: float = Field(
        3e-3, gt=0, le=MAX_LR, description="Peak learning rate, at most 1 (linear warmup, cosine decay)."
    )
    warmup_steps: int = Field(20, ge=0, description="Linear warmup steps.")
    micro_batch_tokens: int | None = Field(
        None,
        ge=1,
        description="Largest padded micro-batch (rows x longest sequence) per forward/backward; gradients accumulate over the step's micro-batches (same gradient, bounded memory). null: the whole batch at once.",
    )
    difficulty: float | str | None = Field(
        None, description="SFT difficulty (default: each task's training difficulty)."
    )
    rejection_sampling_rounds: int = Field(
        0, ge=0, description="Rounds of rejection-sampling fine-tuning on the policy's own verified-correct samples."
    )
    rejection_samples: int = Field(4, ge=1, description="Samples per problem in rejection sampling.")
    rejection_problems: int = Field(256, ge=1, description="Problems per rejection-sampling round.")
    rejection_steps: int = Field(50, ge=1, description="Optimizer steps per rejection-sampling round.")


class SelfPlayConfig(Strict):
    """Self-play: the policy writes problems (proposer) and solves them (solver) in the same run and update
    (docs/synthesis.md, "Self-play")."""

    enabled: bool = Field(False, description="Add the self-play game's groups to every RL step.")
    proposer: str = Field(
        "propose_expression",
        description="The game: a registered proposer task (its verifier checks proposals; they are problems of its "
        "solver task). The proposer task and its solver task must both be in `tasks`.",
    )
    prompts: int = Field(4, ge=1, description="Proposer prompts per step; each is a GRPO group of `proposals`.")
    proposals: int = Field(8, ge=2, description="Proposals per proposer prompt (the proposer's group size).")
    solver_group_size: int = Field(
        8, ge=2, description="Solver completions per valid proposal; their success rate p sets the proposer's reward."
    )
    reward: str = Field(
        "variance",
        description="Proposer reward of a valid proposal from p: variance 4p(1-p), triangle 1-|2p-1|, azr 1-p for "
        "0<p<1 else 0 (Absolute Zero). An invalid proposal gets `invalid_reward`.",
    )
    invalid_reward: float = Field(
        0.0,
        description="Proposer reward of a proposal the verifier rejects (parse failure, wrong claim, constraint "
        "violation), from -1 to 0. 0 treats it like a valid proposal that is always or never solved; a negative "
        "value pushes the proposer to validity (Absolute Zero penalises malformed proposals).",
    )
    max_new_tokens: int | None = Field(
        None, ge=1, description="Longest proposal in tokens (default: rl.max_new_tokens)."
    )

    _reward = field_validator("reward")(registered(LEARNABILITY.lookup))

    @field_validator("invalid_reward")
    @classmethod
    def _invalid_reward_range(cls, value):
        if not -1.0 <= value <= 0.0:
            raise ValueError(f"selfplay.invalid_reward must be between -1 and 0, got {value}")
        return value

    @field_validator("proposer")
    @classmethod
    def _proposer_task(cls, name):
        from polyrl.tasks.proposer import proposer_task_class

        try:
            proposer_task_class(name)
        except UserError as exc:
            raise ValueError(str(exc)) from None
        return name


class EvalConfig(Strict):
    """Held-out evaluation on the eval seed space."""

    problems_per_task: int = Field(100, ge=1, description="Held-out problems per task.")
    every: int = Field(0, ge=0, description="Evaluate every N RL steps (0: only before and after RL).")
    pass_k: int = Field(4, ge=1, description="Samples per problem for pass@k (1 disables sampling).")
    temperature: float = Field(DEFAULT_TEMPERATURE, gt=0, description="Sampling temperature for pass@k.")
    max_new_tokens: int | None = Field(None, description="Longest completion (default: rl.max_new_tokens).")
    attempts: int = Field(
        1,
        ge=1,
        description="Greedy attempts per held-out problem: above 1, a wrong answer gets env/retry's feedback and "
        "the policy answers again; each task then reports attempt1..attemptN (correct within k attempts), and "
        "env/retry:<task> is scored on <task>'s problems under that name (docs/evaluation.md).",
    )


class TrainConfig(Strict):
    """Everything `polyrl train` does, in one file."""

    seed: int = Field(
        0,
        ge=0,
        le=MAX_SEED,
        description="Run seed, 0 to 2**63-1 (what torch and numpy take): every random choice flows from it.",
    )
    run_dir: str = Field("runs/default", description="Run directory (config, metrics, checkpoints, models).")
    device: str = Field(
        DEFAULT_DEVICE,
        description="Torch device the policy trains on: auto (CUDA when this machine has it, else the CPU), cpu, cuda, cuda:N or mps; printed at the start of a run (under torchrun each rank takes cuda:LOCAL_RANK).",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="torch CPU threads, at most 4 per CPU core (default: half the CPU cores, 1 to 4; see docs/training.md).",
    )
    deterministic: bool = Field(
        True,
        description="torch's deterministic algorithms: the same seed gives bit-identical weights on the same machine and software at the same thread count; another thread count sums in another order and ends close, not identical (docs/training.md, Determinism).",
    )
    keep_freed_memory: bool = Field(
        True,
        description="On Linux (glibc): keep memory torch frees in the process for the next tensor instead of returning it to the kernel, so large tensors are not page-faulted in again every step (the process keeps its peak; docs/benchmarks.md).",
    )
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy.")
    prompt: PromptConfig = Field(default_factory=PromptConfig, description="How problems are shown.")
    tasks: list[TaskSpec] = Field(description="The training mix.", min_length=1)
    sampler: SamplerConfig = Field(default_factory=SamplerConfig, description="Task sampler.")
    difficulty_control: DifficultyControlConfig = Field(
        default_factory=DifficultyControlConfig, description="Difficulty controller."
    )
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Reward terms and weights.")
    verifier: VerifierConfig = Field(
        default_factory=VerifierConfig,
        description="Limits of the worker processes that run verifiers which are not pure (rg/ tasks, plugins, expression-evaluating dataset verifiers).",
    )
    env: EnvConfig = Field(default_factory=EnvConfig, description="Limits of multi-turn environments (env/... tasks).")
    sft: SFTConfig = Field(default_factory=SFTConfig, description="Warm start.")
    rl: RLConfig = Field(default_factory=RLConfig, description="RL stage.")
    selfplay: SelfPlayConfig = Field(
        default_factory=SelfPlayConfig, description="Self-play proposer and solver (off by default)."
    )
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Held-out evaluation.")
    generation: GenerationConfig = Field(default_factory=GenerationConfig, description="Generation engine.")
    backend: Literal["local", "ray"] = Field(
        "local", description="Where rollouts run: in this process, or on Ray worker actors (see the ray section)."
    )
    ray: RayConfig = Field(
        default_factory=RayConfig,
        description="Ray workers, cluster address and asynchronous mode (used when backend is ray).",
    )
    checkpoint_every: int = Field(50, ge=1, description="Save a checkpoint every N RL steps (and at stage ends).")
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept on disk (older ones are deleted).")
    tensorboard: bool = Field(
        True, description="Write TensorBoard event files (same as listing tensorboard in logging.trackers)."
    )
    logging: LoggingConfig = Field(
        default_factory=LoggingConfig, description="Experiment trackers (TensorBoard, trackio, W&B, MLflow)."
    )
    progress: bool = Field(True, description="Live progress display in the terminal.")
    resumes: list[ResumeRecord] = Field(
        default_factory=list,
        description="Written by polyrl: the overrides each --resume gave, and the checkpoint they took effect at.",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data):
        """``rl.steps=true`` is refused, not read as 1 step: no boolean where a number belongs, in any section."""
        found = first_bool_number(data, cls)
        if found is not None:
            raise ValueError(f"{found[0]} is {str(found[1]).lower()}, a boolean: give a number")
        return data

    @field_validator("device")
    @classmethod
    def _device(cls, spec: str) -> str:
        return check_device_spec(spec)

    _threads = field_validator("threads")(lambda value: value if value is None else check_threads(value))

    @field_validator("tasks")
    @classmethod
    def _unique(cls, tasks):
        names = [t.name for t in tasks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"tasks listed twice: {', '.join(dup)}")
        return tasks

    @model_validator(mode="after")
    def _finite(self):
        """No NaN or infinity anywhere, options of registered parts included: ``rl.lr=inf`` trained every weight
        to NaN in one step and exited 0."""
        found = first_nonfinite_field(self)
        if found is not None:
            raise ValueError(f"{found[0]} is {found[1]}: every number in the config must be finite")
        return self

    @model_validator(mode="after")
    def _fits_tiny_positions(self):
        """The embedded model's positions are in the config: each response budget is checked here (the
        prompts, and a real model's positions, when the run is built: polyrl.train.lengths)."""
        if self.model.path == TINY:
            check_budgets(response_budgets(self), self.model.tiny.max_positions, "model.tiny.max_positions")
        return self

    @model_validator(mode="after")
    def _prompt_style(self):
        """An unset ``prompt.style`` becomes the model's default, so the saved config shows the one used."""
        self.prompt = self.prompt.resolved(self.model.path)
        return self

    @model_validator(mode="after")
    def _trackers(self):
        """``tensorboard: true`` lists tensorboard in ``logging.trackers``, so the saved config shows every tracker."""
        listed = "tensorboard" in self.logging.trackers
        if self.tensorboard and not listed:
            self.logging.trackers = ["tensorboard", *self.logging.trackers]
        elif not self.tensorboard and listed:
            raise ValueError("logging.trackers lists tensorboard but tensorboard is false: drop one of them")
        if len(set(self.logging.trackers)) < len(self.logging.trackers):
            raise ValueError(f"logging.trackers lists a tracker twice: {self.logging.trackers}")
        return self

    @model_validator(mode="after")
    def _compatible(self):
        check_engine(self.generation, self.device, self.backend)
        if self.model.autocast == "fp16" and device_kind(self.device) != "cuda":
            raise ValueError(f"model.autocast=fp16 needs a CUDA device, not device={self.device}; use bf16 on CPU")
        if self.eval.attempts > 1:
            names = [t.name for t in self.tasks]
            for name in names:
                inner = retried_task_name(name)
                if inner is None and name.startswith(ENV_PREFIX):
                    raise ValueError(
                        f"eval.attempts={self.eval.attempts} retries single-turn answers, but task {name!r} is an "
                        "environment: only plain tasks and env/retry:<task> can be evaluated over several attempts"
                    )
                if inner in names:
                    raise ValueError(
                        f"eval.attempts={self.eval.attempts} scores {name!r} on {inner!r}'s held-out problems, and "
                        f"{inner!r} is in the mix too: keep one of them"
                    )
        self._check_selfplay()
        if self.rl.offpolicy_kl_threshold is not None and self.backend != "ray":
            raise ValueError(
                "rl.offpolicy_kl_threshold masks sequences by their behaviour log-probs, which only backend=ray "
                "rollouts carry (in-process rollouts are on-policy)"
            )
        return self

    def _check_selfplay(self) -> None:
        sp = self.selfplay
        if not sp.enabled:
            if self.rl.prompts_per_step == 0:
                raise ValueError("rl.prompts_per_step is 0: no problems to train on (0 is for selfplay.enabled runs)")
            return
        from polyrl.tasks.proposer import proposer_task_class

        names = [t.name for t in self.tasks]
        for role, name in (("proposer", sp.proposer), ("solver", proposer_task_class(sp.proposer).solver_task)):
            if name not in names:
                raise ValueError(f"selfplay: the {role} task {name!r} is not in tasks; add it to the mix")
        if self.backend != "local":
            raise ValueError("selfplay rolls out in the trainer process; it cannot be combined with backend=ray")


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for p in parts[:-1]:
        if not isinstance(node.get(p, {}), dict):
            raise UserError(f"override {key!r}: {p!r} is not a section")
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def parse_overrides(overrides: list[str]) -> list[tuple[str, Any]]:
    out = []
    for item in overrides:
        if "=" not in item:
            raise UserError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        try:
            value = safe_load(raw) if raw else ""
        except DuplicateKeyError as exc:
            raise UserError(f"override {item!r}: {describe(exc)}") from None
        except yaml.YAMLError:
            value = raw
        out.append((key.strip(), value))
    return out


def upgrade_saved(data: dict[str, Any]) -> None:
    """A run directory's saved config from an earlier version, in place: its flat per-objective keys
    (:data:`MOVED_OBJECTIVE_KEYS`, saved with every run) move into ``rl.objective_settings`` when they
    belong to the run's objective, and are dropped otherwise (no other objective read them)."""
    rl = data.get("rl")
    if not isinstance(rl, dict):
        return
    for old, (objective, key) in MOVED_OBJECTIVE_KEYS.items():
        if old in rl:
            value = rl.pop(old)
            if rl.get("objective") == objective:
                rl.setdefault("objective_settings", {})[key] = value


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    base: dict | None = None,
    saved: bool = False,
) -> TrainConfig:
    """Load ``path`` (YAML) over ``base``, apply ``key=value`` overrides and validate. ``saved``: ``path`` is a
    run directory's config.yaml, which an earlier version may have written (:func:`upgrade_saved`)."""
    data: dict[str, Any] = dict(base or {})
    if path is not None:
        loaded = read_yaml(path, "config")
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise UserError(f"config {str(path)!r} must be a mapping of fields, got {type(loaded).__name__}")
        data.update(loaded)
    if saved:
        upgrade_saved(data)
    for key, value in parse_overrides(overrides or []):
        _set_dotted(data, key, value)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = "".join(f"{x}: " if i == len(err["loc"]) - 1 else f"{x}." for i, x in enumerate(err["loc"]))
        msg = err["msg"].replace("Value error, ", "")
        if err["type"] == "extra_forbidden":
            msg = "unknown option"
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise UserError(f"invalid config: {loc}{msg}{more}") from None


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write the resolved config (atomically: a run killed meanwhile has the whole file or none)."""
    atomic_write_text(path, yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
