"""Environment registry: ``env/<name>`` and ``env/<name>:<argument>`` task names.

An environment is registered as a factory ``(argument, options) -> EnvTask``; the argument is what follows
the colon (a wrapped task for ``retry``/``calculator``/``python``, a game id for ``textarena``). This module
registers the ``env/`` task-name prefix, so ``env/...`` names work wherever a task name does
(:func:`polyrl.tasks.resolve_task`). A plugin package registers its environments with :func:`register_env`
on import and names the module in an entry point: ``[project.entry-points."polyrl.envs"] my_env =
"my_package.envs"`` (or names a factory taking no argument: ``my_env = "my_package.envs:make_my_env"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from polyrl.envs.environment import EnvTask
from polyrl.envs.sandbox import SandboxMode
from polyrl.envs.tool_formats import check_tool_format
from polyrl.errors import UserError
from polyrl.registry import Registry, registered
from polyrl.tasks.prefixes import TaskRequest, register_task_prefix, with_answer_format

ENV_PREFIX = "env/"
MAX_EPISODE_TOKENS = 384
"""Default ``env.max_episode_tokens`` (also the default of the rollout and evaluation functions)."""
ENV_CONCURRENCY = 16
"""Default ``env.concurrency``."""


@dataclass(frozen=True)
class EnvFactory:
    """A registered environment: its factory and whether its name takes ``:<argument>``."""

    factory: Callable[..., EnvTask]
    needs_argument: bool = False


def _env_entry(name: str, factory: Any, **metadata: Any) -> EnvFactory:
    if not callable(factory):
        raise TypeError(f"an environment entry point names a module or a factory, got {factory!r}")
    return EnvFactory(factory, **metadata)


ENVS: Registry[EnvFactory] = Registry(
    "environment",
    "polyrl.envs",
    builtins=tuple(
        f"polyrl.envs.{module}" for module in ("tool_use", "retry", "search", "games", "textarena_adapter")
    ),
    entry=_env_entry,
)


class EnvConfig(BaseModel):
    """Limits shared by every multi-turn environment in the mix."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int | None = Field(
        None, ge=1, description="Policy turns per episode (default: each environment's own)."
    )
    max_episode_tokens: int = Field(
        MAX_EPISODE_TOKENS, ge=8, description="Total response tokens per episode, policy and environment together."
    )
    tool_timeout_s: float = Field(5.0, gt=0, description="Wall-clock limit of one tool call in seconds.")
    attempts: int = Field(3, ge=1, description="Attempts of env/retry (the first one included).")
    retry_discount: float = Field(
        0.5, ge=0, le=1, description="env/retry: reward of a success at attempt k is discount**(k-1)."
    )
    tool_format: str = Field(
        "auto",
        description="Tool-call syntax of the policy: auto (from the chat template), a model family, or native "
        "(the tokenizer's own response_template).",
    )
    python_sandbox: SandboxMode = Field(
        "bwrap",
        description="How env/python runs snippets: `bwrap` isolates them with bubblewrap (Debian package "
        "`bubblewrap`); `unsafe_local` runs them unisolated, with rlimits only (see docs/security.md).",
    )
    concurrency: int = Field(
        ENV_CONCURRENCY,
        ge=1,
        description="Environment steps run at once by the in-process backend (threads; async-native environments "
        "on an event loop), so that tool waits overlap; 1 steps environments one after another.",
    )

    _tool_format = field_validator("tool_format")(registered(check_tool_format))


def register_env(name: str, *, needs_argument: bool = False) -> Callable[[Callable], Callable]:
    """Decorator for a factory ``(argument: str | None, config: EnvConfig) -> EnvTask`` named ``env/<name>``;
    with ``needs_argument`` the name takes ``:<argument>``."""
    return ENVS.register(name, needs_argument=needs_argument)


def list_envs() -> list[str]:
    return [f"{ENV_PREFIX}{n}" + (":<argument>" if ENVS[n].needs_argument else "") for n in ENVS.names()]


def get_env_task(name: str, config: EnvConfig | None = None) -> EnvTask:
    """The EnvTask for ``env/<name>[:<argument>]``."""
    base, _, argument = name[len(ENV_PREFIX) :].partition(":")
    if base not in ENVS:
        raise UserError(ENVS.unknown_message(base, prefix=ENV_PREFIX))
    spec = ENVS[base]
    if spec.needs_argument and not argument:
        raise UserError(f"environment {name!r} needs an argument: {ENV_PREFIX}{base}:<name>")
    if argument and not spec.needs_argument:
        raise UserError(f"environment {ENV_PREFIX}{base} takes no argument (got {argument!r})")
    task = spec.factory(argument or None, config or EnvConfig())
    inner = getattr(task, "inner", None)
    if inner is not None and inner.rollout_kind != "single_turn":
        raise UserError(f"environment {ENV_PREFIX}{base} wraps a single-turn task, not {argument!r}")
    task.name = name
    return task


@register_task_prefix(ENV_PREFIX)
def _env_by_name(request: TaskRequest) -> EnvTask:
    """``env/<name>[:<argument>]``: the environment, with the run's ``env`` limits."""
    return with_answer_format(get_env_task(request.name, request.env), request)
