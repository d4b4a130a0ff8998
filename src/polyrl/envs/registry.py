"""Environment registry: ``env/<name>`` and ``env/<name>:<argument>`` task names.

An environment is registered as a factory ``(argument, options) -> EnvTask``; the argument is what follows
the colon (a wrapped task for ``retry``/``calculator``/``python``, a game id for ``textarena``).
:func:`resolve_task` is what the trainer calls for every task name, so ``env/...`` names work wherever a
task name does. A plugin package registers its environments on import and names the module in an
entry point: ``[project.entry-points."polyrl.envs"] my_env = "my_package.envs"``.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from polyrl.envs.base import EnvTask
from polyrl.errors import UserError
from polyrl.registry import load_plugins
from polyrl.tasks import Task, get_task

ENV_PREFIX = "env/"
_FACTORIES: dict[str, tuple[Callable[..., EnvTask], bool]] = {}
_BUILTIN_MODULES = ("tool_use", "retry", "search", "games", "textarena_adapter")
_LOADED = False


class EnvConfig(BaseModel):
    """Limits shared by every multi-turn environment in the mix."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int | None = Field(
        None, ge=1, description="Policy turns per episode (default: each environment's own)."
    )
    max_episode_tokens: int = Field(
        384, ge=8, description="Total response tokens per episode, policy and environment together."
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
    concurrency: int = Field(
        16,
        ge=1,
        description="Environment steps run at once by the in-process backend (threads; async-native environments "
        "on an event loop), so that tool waits overlap; 1 steps environments one after another.",
    )


def register_env(name: str, needs_argument: bool = False):
    """Decorator for a factory ``(argument: str | None, config: EnvConfig) -> EnvTask`` named ``env/<name>``."""

    def wrap(factory):
        _FACTORIES[name] = (factory, needs_argument)
        return factory

    return wrap


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for mod in _BUILTIN_MODULES:
        importlib.import_module(f"polyrl.envs.{mod}")
    load_plugins("polyrl.envs", "environment")  # plugins register themselves with @register_env on import


def list_envs() -> list[str]:
    _load()
    return sorted(f"{ENV_PREFIX}{n}" + (":<argument>" if arg else "") for n, (_, arg) in _FACTORIES.items())


def get_env_task(name: str, config: EnvConfig | None = None) -> EnvTask:
    """The EnvTask for ``env/<name>[:<argument>]``."""
    _load()
    base, _, argument = name[len(ENV_PREFIX) :].partition(":")
    if base not in _FACTORIES:
        close = difflib.get_close_matches(base, list(_FACTORIES), n=3)
        hint = (
            f"; did you mean {', '.join(ENV_PREFIX + c for c in close)}?"
            if close
            else f"; known: {', '.join(list_envs())}"
        )
        raise UserError(f"unknown environment {name!r}{hint}")
    factory, needs_argument = _FACTORIES[base]
    if needs_argument and not argument:
        raise UserError(f"environment {name!r} needs an argument: {ENV_PREFIX}{base}:<name>")
    if argument and not needs_argument:
        raise UserError(f"environment {ENV_PREFIX}{base} takes no argument (got {argument!r})")
    task = factory(argument or None, config or EnvConfig())
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
