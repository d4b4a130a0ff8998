"""Environment registry: ``env/<name>`` and ``env/<name>:<argument>`` task names.

An environment is registered as a factory ``(argument, options) -> EnvTask``; the argument is what follows
the colon (a wrapped task for ``retry``/``calculator``/``python``, a game id for ``textarena``).
:func:`resolve_task` is what the trainer calls for every task name, so ``env/...`` names work wherever a
task name does. A plugin package registers its environments with :func:`register_env` on import and
names the module in an entry point: ``[project.entry-points."polyrl.envs"] my_env = "my_package.envs"``
(or names a factory taking no argument: ``my_env = "my_package.envs:make_my_env"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from polyrl.envs.base import EnvTask
from polyrl.envs.sandbox import SandboxMode
from polyrl.errors import UserError
from polyrl.registry import Registry
from polyrl.tasks import Task, get_task
from polyrl.tasks.dataset import dataset_task_name, register_dataset_task

ENV_PREFIX = "env/"
MAX_EPISODE_TOKENS = 384
"""Default ``env.max_episode_tokens`` (also the default of the rollout and evaluation functions)."""
ENV_CONCURRENCY = 16
"""Default ``env.concurrency``."""


@dataclass(frozen=True)
class EnvFactory:
    """A registered environment: its factory and whether its name takes ``:<argument>``."""

    factory: Callable[..., EnvTask]
    needs_argument: bool


def _adopt_plugin_env(name: str, factory: Any) -> None:
    if not callable(factory):
        raise TypeError(f"an environment entry point names a module or a factory, got {factory!r}")
    register_env(name)(factory)


ENVS: Registry[EnvFactory] = Registry(
    "environment",
    "polyrl.envs",
    builtins=tuple(
        f"polyrl.envs.{module}" for module in ("tool_use", "retry", "search", "games", "textarena_adapter")
    ),
    adopt=_adopt_plugin_env,
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
    tool_format: Literal["auto", "hermes", "qwen3", "llama3_json", "mistral", "native"] = Field(
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


def register_env(name: str, needs_argument: bool = False):
    """Decorator for a factory ``(argument: str | None, config: EnvConfig) -> EnvTask`` named ``env/<name>``."""

    def wrap(factory):
        ENVS.add(name, EnvFactory(factory, needs_argument))
        return factory

    return wrap


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
    task.name = name
    return task


def resolve_task(name: str, env_config: EnvConfig | None = None, answer_format=None, **kwargs: Any) -> Task:
    """A task or an environment by name: ``env/...`` names go to the environment registry. ``answer_format``
    (e.g. with think tags for a reasoning model) replaces the task's, and the wrapped task's of an
    environment, so every verifier in the episode reads answers the same way."""
    task = get_env_task(name, env_config) if name.startswith(ENV_PREFIX) else get_task(name, **kwargs)
    node = task
    while answer_format is not None and node is not None:
        node.answer_format = answer_format
        node = getattr(node, "inner", None)
    return task


def resolve_task_spec(spec, env_config=None, answer_format=None) -> Task:
    """The task of one training-mix entry (a ``TaskSpec``): its dataset, if it has one, is registered under the
    entry's name first; then the name resolves as any task name does (``env/...`` wrappers included)."""
    if getattr(spec, "dataset", None) is not None:
        register_dataset_task(dataset_task_name(spec.name), spec.dataset)
    return resolve_task(spec.name, env_config, answer_format)
