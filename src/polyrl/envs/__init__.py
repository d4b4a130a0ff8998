"""Multi-turn agent environments behind one API: ``reset() -> messages``, ``step(text) -> StepResult``.

Environments are tasks named ``env/<name>[:<argument>]`` (see :func:`list_envs`); tools are declared
in the OpenAI function-calling format and called with ``<tool_call>{...}</tool_call>``.
"""

from polyrl.envs.env_registry import ENV_PREFIX, EnvConfig, get_env_task, list_envs, register_env
from polyrl.envs.environment import Environment, EnvTask, StepResult, is_environment
from polyrl.envs.tools import Tool, ToolError, parse_tool_calls

__all__ = [
    "ENV_PREFIX",
    "EnvConfig",
    "EnvTask",
    "Environment",
    "StepResult",
    "Tool",
    "ToolError",
    "get_env_task",
    "is_environment",
    "list_envs",
    "parse_tool_calls",
    "register_env",
]
