"""Generation backends by name: ``generation.engine`` picks one, and a new engine is one registration.

A backend samples completions in the trainer process (RL rollouts, rejection sampling, evaluation) and is
given the current weights after every update (``sync_weights``). Each engine is a :class:`BackendSpec` in
:data:`BACKENDS`, a :class:`~polyrl.registry.Registry` like every other extension kind::

    @register_backend("my_engine", settings=MyEngineSettings, cuda_only=True)
    def make_my_engine(model, tokenizer, ctx: BackendContext):
        return MyEngine(model, tokenizer, seed=ctx.seed, **ctx.own.model_dump())

``make_backend(generation_config, model, tokenizer, seed, share_prompts)`` builds the configured one;
``check_engine`` refuses, in one line, an engine the config's device or rollout placement cannot serve.
Plugins register through the ``polyrl.backends`` entry-point group (docs/plugins.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from polyrl.device import device_kind
from polyrl.policy.generation import CUDA_GRAPHS, GENERATION_BATCH_SIZE
from polyrl.registry import Registry, registered

__all__ = [
    "BACKENDS",
    "BackendContext",
    "BackendSpec",
    "GenerationConfig",
    "check_engine",
    "check_installed",
    "get_backend",
    "make_backend",
    "register_backend",
]


class GenerationConfig(BaseModel):
    """Which engine samples completions (RL, rejection sampling, evaluation) in the trainer process."""

    model_config = ConfigDict(extra="forbid")

    engine: str = Field(
        "transformers",
        description="A registered generation backend: transformers (CPU or GPU, the default) or vllm (optional extra polyrl[vllm], CUDA only; weights synced after every update), or a plugin's.",
    )
    batch_size: int = Field(GENERATION_BATCH_SIZE, ge=1, description="transformers: sequences generated together.")
    cuda_graphs: bool = Field(
        CUDA_GRAPHS,
        description="transformers on CUDA: replay each decode step of polyrl's packed forward as one CUDA graph (a fixed batch: finished rows keep their slots); a small model's eager step is bound by kernel launches.",
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3,
        gt=0,
        le=1,
        description="vllm: share of GPU memory vLLM may take (weights + KV cache); the trainer's model and optimizer need the rest.",
    )
    vllm_max_model_len: int | None = Field(
        None, ge=16, description="vllm: longest prompt + completion (default: the model's)."
    )
    vllm_enforce_eager: bool = Field(False, description="vllm: skip CUDA graph capture (faster start, slower steps).")
    vllm_dtype: str = Field("auto", description="vllm: weights dtype (auto follows the checkpoint).")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="A plugin engine's own settings, validated against the settings class it was registered with.",
    )

    _engine = field_validator("engine")(registered(lambda name: get_backend(name)))


@dataclass(frozen=True)
class BackendContext:
    """What an engine's factory is given besides the model and tokenizer."""

    generation: GenerationConfig
    """The whole ``generation`` section (engine-specific fields such as ``vllm_*``)."""
    seed: int
    """The run seed (engines that seed their own sampler)."""
    share_prompts: bool
    """``rl.share_prompts``: prefill each distinct prompt once per group."""
    device: Any
    """The ``torch.device`` the model's weights are on (the run's placement decided it)."""
    own: Any = None
    """``generation.options`` validated against the engine's settings class (None without one)."""


@dataclass(frozen=True)
class BackendSpec:
    """One generation engine: its factory and what it needs."""

    name: str
    make: Callable[[Any, Any, BackendContext], Any]
    """``(model, tokenizer, context) -> backend`` with ``generate`` and ``sync_weights``."""
    settings: type[BaseModel] | None = None
    """The class ``generation.options`` is validated against (None: the engine takes no options)."""
    cuda_only: bool = False
    """Refused unless ``device`` is CUDA."""
    shares_weights: bool = False
    """Generates from the trainer's own tensors (transformers): the only kind Ray workers and the
    multi-process trainer's per-rank replicas run; any other engine holds its own copy, in one process."""
    check: Callable[[], Any] | None = None
    """Called before any training starts: raises a UserError when the engine is not installed."""


BACKENDS: Registry[BackendSpec] = Registry(
    "generation backend",
    "polyrl.backends",
    builtins=("polyrl.policy.backends", "polyrl.policy.vllm_backend"),
    entry=lambda name, make, **metadata: BackendSpec(name, make, **metadata),
)


def register_backend(
    name: str,
    *,
    settings: type[BaseModel] | None = None,
    cuda_only: bool = False,
    shares_weights: bool = False,
    check: Callable[[], Any] | None = None,
) -> Callable[[Callable], Callable]:
    """Decorator: register the decorated factory ``(model, tokenizer, context) -> backend`` as ``name``."""
    return BACKENDS.register(name, settings=settings, cuda_only=cuda_only, shares_weights=shares_weights, check=check)


def get_backend(name: str) -> BackendSpec:
    """The engine registered as ``name``; a UserError listing the known names otherwise."""
    return BACKENDS.lookup(name)


def check_engine(generation: GenerationConfig, device: str, backend: str) -> None:
    """ValueError (the config's one-line message) for an engine this device or rollout placement can't serve,
    or ``generation.options`` its settings class refuses."""
    spec = get_backend(generation.engine)
    engine = f"generation.engine={generation.engine}"
    if backend == "ray" and not spec.shares_weights:
        raise ValueError(
            f"{engine} samples in the trainer process; it cannot be combined with backend=ray, whose rollout "
            "workers generate with transformers"
        )
    if spec.cuda_only and device_kind(device) != "cuda":
        raise ValueError(f"{engine} needs a CUDA device (device=cuda), not device={device}")
    if spec.settings is None and generation.options:
        raise ValueError(f"{engine} takes no generation.options ({', '.join(sorted(generation.options))})")
    if spec.settings is not None:
        spec.settings.model_validate(generation.options)


def check_installed(generation: GenerationConfig) -> None:
    """UserError when the configured engine is not installed (before a run starts anything)."""
    spec = get_backend(generation.engine)
    if spec.check is not None:
        spec.check()


def make_backend(generation: GenerationConfig, model, tokenizer, seed: int, share_prompts: bool, device):
    """The configured engine's backend over ``model`` (its weights on ``device``)."""
    spec = get_backend(generation.engine)
    own = spec.settings.model_validate(generation.options) if spec.settings is not None else None
    return spec.make(model, tokenizer, BackendContext(generation, seed, share_prompts, device, own))


# ---------------------------------------------------------------------------------------------------------
# The built-in engine that shares the trainer's tensors (vllm registers in polyrl.policy.vllm_backend)


@register_backend("transformers", shares_weights=True)
def _transformers(model, tokenizer, ctx: BackendContext):
    from polyrl.policy.generation import TransformersBackend

    return TransformersBackend(
        model,
        tokenizer,
        batch_size=ctx.generation.batch_size,
        shared_prefill=ctx.share_prompts,
        device=ctx.device,
        cuda_graphs=ctx.generation.cuda_graphs,
    )
