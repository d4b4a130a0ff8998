"""How the policy's text becomes an OpenEnv action, and how an OpenEnv observation becomes a message.

The action's kind follows from its JSON schema (the Action class's ``model_json_schema()`` in process, the server's
``GET /schema`` remotely), so both run the same way:

* **text**: one field besides OpenEnv's ``metadata``, a string: the policy's whole turn is that field
  (``{"message": <text>}``);
* **mcp**: the generic ``Action`` or an MCP action (``ListToolsAction``/``CallToolAction``; in process also any
  ``MCPEnvironment``): the tools ``ListToolsAction`` lists at the start of each episode are offered in the run's
  tool-call format, and each call becomes ``CallToolAction(tool_name, arguments)``;
* **tool**: any other action: its schema (without ``metadata``) is offered as one tool named after the class
  (``Guess`` → ``guess``), and a call's arguments become the action.

Observations (the wire format: ``{"observation": {...}, "reward": ..., "done": ...}``) are rendered by
:func:`observation_text`: the fields other than ``metadata``, one as its text alone, several as ``name: value``
lines; a ``CallToolObservation`` as its result's text, or ``error: …``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from polyrl.envs.hub_episode import as_text

MCP_ACTIONS = ("Action", "ListToolsAction", "CallToolAction")
"""Action schema titles that mean an environment speaks MCP (the generic base, or OpenEnv's MCP actions)."""
HIDDEN_FIELDS = ("metadata",)
"""Fields of OpenEnv's base Action and Observation that carry no content for the policy."""
LIST_TOOLS = {"type": "list_tools"}


@dataclass(frozen=True)
class ActionKind:
    """How one environment's actions are made from the policy's turns."""

    kind: Literal["text", "tool", "mcp"]
    field: str | None = None
    """text: the field the turn fills."""
    tool: dict[str, Any] | None = None
    """tool: the action as one tool, in the OpenAI function format."""


def _snake(title: str) -> str:
    name = re.sub(r"Action$", "", title or "")
    name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    return re.sub(r"[^a-z0-9_]", "_", name).strip("_") or "act"


def action_kind(schema: dict[str, Any], mcp: bool = False) -> ActionKind:
    """The kind of ``schema``'s actions (see the module); ``mcp``: the environment speaks MCP whatever it says."""
    title = schema.get("title", "")
    properties = {k: v for k, v in (schema.get("properties") or {}).items() if k not in HIDDEN_FIELDS}
    if mcp or title in MCP_ACTIONS:
        return ActionKind("mcp")
    if len(properties) == 1 and next(iter(properties.values())).get("type") == "string":
        return ActionKind("text", field=next(iter(properties)))
    parameters = {k: v for k, v in schema.items() if k not in ("title", "description")}
    parameters["properties"] = properties
    parameters["required"] = [r for r in schema.get("required", []) if r in properties]
    description = (schema.get("description") or f"The {title or 'environment'}'s action.").strip()
    tool = {
        "type": "function",
        "function": {"name": _snake(title), "description": description, "parameters": parameters},
    }
    return ActionKind("tool", tool=tool)


def listed_tools(observation: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools of a ``ListToolsObservation`` (its ``tools``: name, description, input_schema) as OpenAI tools."""
    tools = []
    for tool in observation.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            parameters = tool.get("input_schema") or {"type": "object", "properties": {}}
            function = {"name": tool["name"], "description": tool.get("description") or "", "parameters": parameters}
            tools.append({"type": "function", "function": function})
    return tools


def call_tool_action(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": name, "arguments": arguments}


def call_result(observation: dict[str, Any]) -> tuple[str, bool]:
    """A ``CallToolObservation``'s text and whether the call succeeded: its ``error`` (transport, unknown tool,
    bad arguments), or its result (FastMCP's ``CallToolResult``: the text of its content, flagged ``is_error``)."""
    error = observation.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        return f"error: {as_text(message).strip().splitlines()[0] if as_text(message).strip() else 'failed'}", False
    result = observation.get("result")
    if isinstance(result, dict) and isinstance(result.get("content"), list):
        texts = [c.get("text", "") for c in result["content"] if isinstance(c, dict) and c.get("type") == "text"]
        text = "\n".join(texts) if texts else as_text(result.get("data"))
        return (f"error: {text}", False) if result.get("is_error") else (text, True)
    return as_text(result), True


def observation_text(observation: dict[str, Any]) -> str:
    """An observation's fields as message text: one field as its value's text, several as ``name: value`` lines;
    empty values and ``metadata`` left out."""
    fields = {k: v for k, v in observation.items() if k not in HIDDEN_FIELDS and v not in (None, "", [], {})}
    if len(fields) == 1:
        return as_text(next(iter(fields.values())))
    return "\n".join(f"{k}: {as_text(v)}" for k, v in fields.items())
