"""Single-turn tasks played with a tool: ``env/calculator:<task>`` and ``env/python:<task>``.

The calculator evaluates ``+ - * /`` and parentheses exactly (bounded, no ``eval``); the Python tool runs
a snippet in :mod:`polyrl.envs.sandbox` and returns what it printed. For tasks whose question is an
arithmetic expression (``addition``, ``multiplication``, …) the reference trajectory is one tool call
and then the answer, so the SFT warm start teaches the protocol.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from polyrl.envs.env_registry import EnvConfig, register_env
from polyrl.envs.environment import Environment
from polyrl.envs.sandbox import SandboxLimits, SandboxMode, check_sandbox, run_python
from polyrl.envs.tool_formats import HERMES, UsesToolFormat
from polyrl.envs.tools import Tool, ToolEnvironment, ToolError
from polyrl.envs.wrapped import WrappedTask
from polyrl.tasks import Problem, get_task
from polyrl.tasks.builtin._parse import evaluate_expression


def format_number(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _calculate(args: dict, timeout_s: float) -> str:
    # evaluate_expression is linear-time and bounded in length, depth and digits: no timeout needed
    try:
        return format_number(evaluate_expression(args["expression"], max_chars=200, max_digits=30)[0])
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except ValueError as exc:
        raise ToolError(f"cannot evaluate: {exc}") from None


CALCULATOR = Tool(
    "calculator",
    "Evaluate an arithmetic expression with + - * / and parentheses.",
    {
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
        "additionalProperties": False,
    },
    _calculate,
)


def python_tool(limits: SandboxLimits, mode: SandboxMode = "bwrap") -> Tool:
    """The ``python(code)`` tool: runs the snippet with :func:`polyrl.envs.sandbox.run_python` in ``mode``."""

    def run(args: dict, timeout_s: float) -> str:
        result = run_python(args["code"], replace(limits, wall_s=min(limits.wall_s, timeout_s)), mode)
        if result.status != "ok":
            last = result.stderr.strip().splitlines()[-1:] or [""]
            raise ToolError(f"{result.status}: {last[0][:300]}".rstrip(": "))
        return result.stdout.strip() or "(no output)"

    return Tool(
        "python",
        "Run Python code in a sandbox and return what it prints.",
        {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
            "additionalProperties": False,
        },
        run,
    )


def _expression(problem: Problem) -> str | None:
    """The question as an arithmetic expression, when it is one (``1234*5678=``)."""
    text = problem.question.strip().rstrip("=?").strip()
    try:
        evaluate_expression(text)
    except (ValueError, ZeroDivisionError):
        return None
    return text


def tool_call_text(name: str, arguments: dict) -> str:
    """One call in the Hermes ``<tool_call>`` form (compact JSON)."""
    return HERMES.write([(name, arguments)])


class ToolTask(UsesToolFormat, WrappedTask):
    """A wrapped task with one tool; its calls follow ``env.tool_format``."""

    def __init__(self, inner, tool: Tool, config: EnvConfig):
        super().__init__(inner, config.max_turns or 3)
        self.tool = tool
        self.tool_timeout_s = config.tool_timeout_s
        self.use_tool_format(config.tool_format)

    def make_env(self, problem: Problem) -> Environment:
        env = ToolEnvironment(
            problem, self.inner, [self.tool], self.max_turns, self.tool_timeout_s, self.requested_tool_format
        )
        env.bind_tool_format(self.tool_format, self.response_template)
        return env

    def reference_actions(self, problem: Problem) -> list[str] | None:
        expr = _expression(problem)
        if problem.solution is None:
            return None
        if expr is None:
            return [self.answer_format.wrap(problem.solution)]
        args = {"expression": expr} if self.tool.name == "calculator" else {"code": f"print({expr})"}
        return [self.tool_format.write([(self.tool.name, args)]), self.answer_format.wrap(problem.solution)]


@register_env("calculator", needs_argument=True)
def calculator_env(argument: str, config: EnvConfig) -> ToolTask:
    return ToolTask(get_task(argument), CALCULATOR, config)


@register_env("python", needs_argument=True)
def python_env(argument: str, config: EnvConfig) -> ToolTask:
    check_sandbox(config.python_sandbox)  # fail when the run starts, not at the first tool call
    tool = python_tool(SandboxLimits(wall_s=config.tool_timeout_s), config.python_sandbox)
    return ToolTask(get_task(argument), tool, config)
