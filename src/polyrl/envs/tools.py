"""Tools in the OpenAI function-calling format, argument checking, and a tool-using environment.

A tool is a JSON Schema declaration plus a Python function of its arguments. The model calls one in its
family's syntax (:mod:`polyrl.envs.tool_formats`): by default
``<tool_call>{"name": "calculator", "arguments": {"expression": "12*34"}}</tool_call>``, the plain tagged
format for models without a native tool format (the tiny model has single tokens for the tags) and the one
Hermes/Qwen chat templates teach; Llama 3 JSON and Mistral ``[TOOL_CALLS]`` with those templates. Anything
wrong with a call becomes a tool-result message that states the reason; nothing a model writes can crash a
rollout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from polyrl.envs.environment import Environment, Message, StepResult
from polyrl.envs.tool_formats import ToolCall, UsesToolFormat, call_id, example_call, parse_tool_calls
from polyrl.tasks.base import Problem, Task

__all__ = ["Tool", "ToolCall", "ToolEnvironment", "ToolError", "call_tool", "check_arguments", "parse_tool_calls"]
MAX_CALLS_PER_TURN = 4
MAX_RESULT_CHARS = 2000
_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


@dataclass
class Tool:
    """A callable tool: ``run(arguments, timeout_s) -> str`` raises ToolError for errors the model caused."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON Schema of the arguments object."""
    run: Callable[[dict[str, Any], float], str]

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ToolError(Exception):
    """A failed tool call; its message goes back to the model."""


def check_arguments(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    """The first way ``args`` violates the (flat) object ``schema``, or None."""
    props = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in args:
            return f"missing argument {name!r}"
    for name, value in args.items():
        if name not in props:
            if schema.get("additionalProperties", True) is False:
                return f"unknown argument {name!r}"
            continue
        want = props[name].get("type")
        ok = isinstance(value, _JSON_TYPES.get(want, object)) and not (
            want in ("integer", "number") and isinstance(value, bool)
        )
        if not ok:
            return f"argument {name!r} must be of type {want}"
    return None


def call_tool(tools: dict[str, Tool], call: ToolCall, timeout_s: float) -> tuple[str, bool]:
    """Run one call; returns ``(result text, ok)``. Errors are results too, prefixed ``error:``."""
    if call.error:
        return f"error: {call.error}", False
    if call.name not in tools:
        return f"error: unknown tool {call.name!r}; available: {', '.join(tools)}", False
    tool = tools[call.name]
    problem = check_arguments(tool.parameters, call.arguments or {})
    if problem:
        return f"error: {problem}", False
    try:
        result = tool.run(call.arguments or {}, timeout_s)
    except ToolError as exc:
        return f"error: {exc}", False
    if len(result) > MAX_RESULT_CHARS:
        result = result[:MAX_RESULT_CHARS] + "…[truncated]"
    return result, True


class ToolEnvironment(UsesToolFormat, Environment):
    """A single-turn task played with tools: call tools for some turns, then answer in the task's format.

    Calls are read in the episode's tool format (:mod:`polyrl.envs.tool_formats`). An action with tool calls
    runs them (at most ``MAX_CALLS_PER_TURN``) and returns their results as tool-result messages of that
    format; an action with an answer and no tool call ends the episode with the task's verdict;
    an answer together with a tool call is an answer at the wrong moment (an error observation); an
    action with neither is an invalid action. The final reward is the verifier score.
    """

    def __init__(
        self,
        problem: Problem,
        task: Task,
        tools: list[Tool],
        max_turns: int,
        tool_timeout_s: float,
        tool_format: str,
    ):
        super().__init__(problem, max_turns)
        self.use_tool_format(tool_format)
        self.task = task
        self.tool_list = tools
        self.by_name = {t.name: t for t in tools}
        self.tools = [t.schema() for t in tools]
        self.tool_timeout_s = tool_timeout_s

    def reset(self) -> list[Message]:
        return [{"role": "user", "content": self.problem.prompt}]

    def step(self, action: str) -> StepResult:
        self.turn += 1
        calls = self.tool_format.parse(action, self.response_template)
        has_answer = self.task.answer_format.extract(action).answer is not None
        if not calls:
            if has_answer or self.turn >= self.max_turns:
                verdict = self.task.verify(self.problem, action)
                return self.end(
                    verdict.score,
                    verdict.correct,
                    verdict.score,
                    verdict.reason if has_answer else "max_turns",
                    verdict.answer,
                )
            self.stats["invalid_actions"] += 1
            return StepResult([{"role": "user", "content": self.neither_message()}], 0.0, False)
        observation = []
        if has_answer:
            self.stats["invalid_actions"] += 1
            observation.append(
                {
                    "role": "user",
                    "content": "error: answer given together with a tool call; answer after reading the result.",
                }
            )
        for k, call in enumerate(calls[:MAX_CALLS_PER_TURN]):
            self.stats["tool_calls"] += 1
            result, ok = call_tool(self.by_name, call, self.tool_timeout_s)
            self.stats["tool_errors"] += not ok
            observation.append(self.tool_format.result_message(call, result, call_id(call, self.turn, k)))
        if len(calls) > MAX_CALLS_PER_TURN:
            self.stats["tool_errors"] += 1
            excess = calls[MAX_CALLS_PER_TURN]
            message = f"error: at most {MAX_CALLS_PER_TURN} tool calls per turn"
            observation.append(
                self.tool_format.result_message(
                    ToolCall(None, None, message, excess.id), message, call_id(excess, self.turn, MAX_CALLS_PER_TURN)
                )
            )
        return self.out_of_turns() or StepResult(observation, 0.0, False)

    def neither_message(self) -> str:
        """The reply to a turn with neither a tool call nor an answer; for an instruction-tuned LM it shows both
        forms again (zero-shot SmolLM2 answered the terse one with the same prose reply, turn after turn)."""
        if not self.natural:
            return "error: no tool call and no answer. Call a tool or answer."
        return (
            "error: that was neither a tool call nor an answer. Call a tool by replying with the call alone, like "
            f"{example_call(self.tools, self.tool_format)}, or answer: {self.task.answer_format.instruction()}"
        )
