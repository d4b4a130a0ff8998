"""Tool-call formats per model family: how a policy writes a call, how the call is parsed, how results go back.

=============  ============================================================  ==============================
format         a call as the model writes it                                 a result goes back as
=============  ============================================================  ==============================
``hermes``     ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``  role ``tool``
               (Qwen2.5-Instruct, Hermes, the tiny model)
``qwen3``      the same; calls inside ``<think>...</think>`` are not calls   role ``tool``
``llama3_json``  ``{"name": ..., "parameters": {...}}`` as the whole turn    role ``ipython``
               (Llama 3.1 / 3.2 Instruct; one call per turn)
``mistral``    ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``     role ``tool`` with a 9-character
               (Mistral-7B-Instruct-v0.3 and other "v3" templates)           ``tool_call_id``
=============  ============================================================  ==============================

Parsing is transformers' response parser (``parse_response`` with a ``response_template``, what
``tokenizer.parse_response`` and TRL run): the tokenizer's own template when it ships one, polyrl's for the
family when it does not. polyrl's templates cut the turn into regions only; the JSON of each call region is
checked here, one call at a time, so one malformed call is one error result and never an exception.
Results are rendered by the chat template itself (the rollout renders observation messages through it);
this module only gives each result message the role and fields that template reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from polyrl.errors import UserError
from polyrl.registry import Registry

Message = dict[str, Any]
CHOSEN_BY_TOKENIZER = ("auto", "native")
"""``env.tool_format`` values that are not a family: the chat template's (auto) or the tokenizer's own (native)."""


@dataclass
class ToolCall:
    name: str | None
    arguments: dict[str, Any] | None
    error: str | None
    """Why the call could not be parsed (None when it parsed)."""
    id: str | None = None
    """The call id the model wrote, if any (Mistral's format carries one)."""


def _json_call(name: str, arguments: dict, key: str = "arguments") -> str:
    return json.dumps({"name": name, key: arguments}, ensure_ascii=False)


def _hermes_calls(calls: list[tuple[str, dict]]) -> str:
    # compact JSON: the tiny model spends one token per character (the templates accept any spacing)
    return "".join(
        f"<tool_call>{json.dumps({'name': n, 'arguments': a}, separators=(',', ':'))}</tool_call>" for n, a in calls
    )


def _llama3_calls(calls: list[tuple[str, dict]]) -> str:
    if len(calls) != 1:
        raise ValueError("Llama 3 JSON tool calls are one call per turn")
    return _json_call(*calls[0], key="parameters")


def _mistral_calls(calls: list[tuple[str, dict]]) -> str:
    return "[TOOL_CALLS] [" + ", ".join(_json_call(n, a) for n, a in calls) + "]"


def _call_regions(open_field: dict, content_close: str, start_anchor: str, reasoning: bool = False) -> dict:
    """A ``response_template`` whose ``tool_calls`` field collects each call region's raw text."""
    fields = {"tool_calls": {**open_field, "repeats": True, "content": "text"}}
    if reasoning:
        fields = {
            "reasoning_content": {"open": "<think>", "close_pattern": r"</think>\s*", "content": "text"},
            **fields,
        }
    fields["content"] = {"close_pattern": content_close, "content": "text", "repeats": True, "join": "\n"}
    return {"defaults": {"role": "assistant"}, "start_anchor": start_anchor, "fields": fields}


_HERMES_CALL = {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*"}
_IM_END = r"<\|im_end\|>\s*"


@dataclass(frozen=True)
class ToolFormat:
    """One family's tool-call syntax: parse template, call writer, and how results are addressed."""

    name: str
    response_template: dict[str, Any]
    """transformers ``response_template`` that finds the call regions of an assistant turn."""
    write: Callable[[list[tuple[str, dict]]], str]
    """Text of an assistant turn making these ``(name, arguments)`` calls (reference trajectories)."""
    result_role: str
    """Role of a tool-result message, as the family's template reads it."""
    call_marker: str
    """What a chat template that renders this format's calls contains (detection and validation)."""
    template_markers: tuple[str, ...] = ()
    """Further strings that must all be in a template for ``auto`` to choose this format."""
    call_ids: bool = False
    """Results carry the id of their call (``tool_call_id``, 9 alphanumerics in Mistral's template)."""
    keep_tokens: tuple[str, ...] = ()
    """Marker tokens that must survive decoding the policy's turn (special tokens in the family's vocabulary)."""
    unclosed: str | None = None
    """The opening tag whose missing close makes the last call an error."""
    call_example: str = '<tool_call>{"name":...,"arguments":{...}}</tool_call>'
    """The call syntax in the one-line tool listing for templates without native tools."""
    detection_rank: int = 0
    """``auto`` tries the families whose markers a chat template holds in decreasing rank (the more specific
    first: qwen3's template also holds hermes's ``<tool_call>``)."""

    def parse(self, text: str, response_template: dict | None = None) -> list[ToolCall]:
        """Every call in an assistant turn, parsed or with the reason it failed."""
        return parse_tool_calls(text, self, response_template)

    def result_message(self, call: ToolCall, content: str, call_id: str) -> Message:
        """The message that carries one call's result back to the policy."""
        message = {"role": self.result_role, "name": call.name or "invalid", "content": content}
        if self.call_ids:
            message["tool_call_id"] = call_id
            message["content"] = content if _is_json(content) else json.dumps(content, ensure_ascii=False)
        return message


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _tool_format_entry(name: str, fmt: Any) -> ToolFormat:
    if not isinstance(fmt, ToolFormat) or fmt.name != name:
        raise TypeError(f"tool format {name!r} must be a ToolFormat named {name!r}, got {fmt!r}")
    return fmt


TOOL_FORMATS: Registry[ToolFormat] = Registry(
    "tool format", "polyrl.tool_formats", builtins=("polyrl.envs.tool_formats",), entry=_tool_format_entry
)


def register_tool_format(name: str) -> Callable[[ToolFormat], ToolFormat]:
    """Decorator (called on a :class:`ToolFormat`): the family's syntax becomes ``env.tool_format: name``."""
    return TOOL_FORMATS.register(name)


def check_tool_format(requested: str) -> str:
    """``requested`` if it is ``auto``, ``native`` or a registered family; the one-line error otherwise."""
    if requested in CHOSEN_BY_TOKENIZER or (isinstance(requested, str) and requested in TOOL_FORMATS):
        return requested
    known = ("auto", *TOOL_FORMATS, "native")
    raise UserError(f"unknown tool format {requested!r}; choose one of {', '.join(known)}")


HERMES = ToolFormat(
    "hermes",
    _call_regions(_HERMES_CALL, _IM_END, "<|im_start|>assistant\n"),
    _hermes_calls,
    "tool",
    "<tool_call>",
    unclosed="<tool_call>",
    detection_rank=1,
)
QWEN3 = ToolFormat(
    "qwen3",
    _call_regions(_HERMES_CALL, _IM_END, "<|im_start|>assistant\n", reasoning=True),
    _hermes_calls,
    "tool",
    "<tool_call>",
    template_markers=("<think>",),
    unclosed="<tool_call>",
    detection_rank=2,
)
LLAMA3_JSON = ToolFormat(
    "llama3_json",
    _call_regions(
        # the whole turn is one JSON object (Llama 3.1 sometimes opens it with <|python_tag|>)
        {"open_pattern": r"^\s*(?:<\|python_tag\|>)?\s*(?=\{)", "close_pattern": r"(?:<\|eo[mt]_id\|>)?\s*$"},
        r"<\|eot_id\|>\s*",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    _llama3_calls,
    "ipython",
    '"parameters"',
    template_markers=("<|start_header_id|>",),
    keep_tokens=("<|python_tag|>",),
    call_example='{"name":...,"parameters":{...}}',
)
MISTRAL = ToolFormat(
    "mistral",
    _call_regions({"open_pattern": r"\[TOOL_CALLS\]\s*", "close_pattern": r"</s>\s*|\s*$"}, r"</s>\s*", "[/INST]"),
    _mistral_calls,
    "tool",
    "[TOOL_CALLS]",
    call_ids=True,
    keep_tokens=("[TOOL_CALLS]",),
    call_example='[TOOL_CALLS] [{"name":...,"arguments":{...}}]',
    detection_rank=3,
)
for _builtin in (HERMES, QWEN3, LLAMA3_JSON, MISTRAL):
    register_tool_format(_builtin.name)(_builtin)


def parse_tool_calls(
    text: str, tool_format: ToolFormat = HERMES, response_template: dict | None = None
) -> list[ToolCall]:
    """Every call in ``text`` in ``tool_format``'s syntax, parsed or with the reason it failed.

    ``response_template`` overrides the format's own (a tokenizer that ships one); its call regions may be
    raw text or already-parsed ``{"type": "function", "function": {...}}`` dicts."""
    from transformers.utils.chat_parsing import parse_response

    try:
        message = parse_response(text, response_template or tool_format.response_template, prefix="")
    except (ValueError, RecursionError):  # a shipped template's JSON parser rejects a malformed call wholesale
        return [ToolCall(None, None, "tool call is not valid JSON")]
    calls = [c for region in message.get("tool_calls", []) for c in _calls_in_region(region)]
    tag = tool_format.unclosed
    if tag and tag in text and tag.replace("<", "</", 1) not in text[text.rindex(tag) :] and calls:
        calls[-1] = ToolCall(None, None, f"unclosed {tag} tag")
    return calls


def _calls_in_region(region: Any) -> list[ToolCall]:
    if isinstance(region, str):
        try:
            region = json.loads(region)
        except (ValueError, RecursionError):  # RecursionError: brackets nested past the parser's depth
            return [ToolCall(None, None, "tool call is not valid JSON")]
    if isinstance(region, list):  # Mistral: all calls of the turn in one JSON list
        if not region:
            return [ToolCall(None, None, "empty list of tool calls")]
        return [_call_from_object(item) for item in region]
    return [_call_from_object(region)]


def _call_from_object(obj: Any) -> ToolCall:
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict):  # OpenAI / transformers message shape
        obj = {**obj["function"], "id": obj.get("id")}
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall(None, None, 'tool call must be a JSON object with a "name" string')
    call_id = obj.get("id") if isinstance(obj.get("id"), str) else None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI sends arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return ToolCall(obj["name"], None, "arguments are not valid JSON", call_id)
    if not isinstance(args, dict):
        return ToolCall(obj["name"], None, "arguments must be a JSON object", call_id)
    return ToolCall(obj["name"], args, None, call_id)


def call_id(call: ToolCall, turn: int, index: int) -> str:
    """The id a result refers to: the call's own when it is 9 alphanumerics (all Mistral's template accepts),
    else ``c`` + 4-digit turn + 4-digit index within the turn."""
    if call.id and len(call.id) == 9 and call.id.isalnum() and call.id.isascii():
        return call.id
    return f"c{turn % 10_000:04d}{index % 10_000:04d}"


class UsesToolFormat:
    """A task or environment whose tool calls follow ``env.tool_format``.

    ``requested_tool_format`` is the configured name; the rollout, which knows the tokenizer, binds the
    resolved format (:meth:`polyrl.rollout.chat.ChatCodec.bind`). Unbound, a named family is used as
    is and ``auto``/``native`` read the Hermes ``<tool_call>`` form."""

    requested_tool_format: str = "auto"
    tool_format: ToolFormat = HERMES
    response_template: dict | None = None
    """The tokenizer's own response template, when it ships one (parsing then uses it)."""

    def use_tool_format(self, requested: str) -> None:
        check_tool_format(requested)
        self.requested_tool_format = requested
        self.tool_format = HERMES if requested in CHOSEN_BY_TOKENIZER else TOOL_FORMATS[requested]

    def bind_tool_format(self, tool_format: ToolFormat, response_template: dict | None) -> None:
        self.tool_format, self.response_template = tool_format, response_template


def detect_tool_format(chat_template: str | None) -> ToolFormat | None:
    """The family whose tool-call syntax ``chat_template`` renders, or None when it renders no tool calls."""
    if not chat_template or not isinstance(chat_template, str):
        return None
    for fmt in sorted(TOOL_FORMATS.values(), key=lambda f: -f.detection_rank):
        if fmt.call_marker in chat_template and all(m in chat_template for m in fmt.template_markers):
            return fmt
    return None


def resolve_tool_format(requested: str, tokenizer) -> tuple[ToolFormat, dict | None]:
    """``(format, response_template)`` for ``env.tool_format`` and this tokenizer.

    ``auto`` takes the family of the chat template (``hermes`` when it renders no tool calls); a named family
    must be one the template renders, or any when the template renders none (tools are then described in
    text in the family's syntax); ``native`` requires the tokenizer's own ``response_template``. The tokenizer's
    ``response_template`` is used for parsing whenever it ships one."""
    template = getattr(tokenizer, "chat_template", None)
    shipped = getattr(tokenizer, "response_template", None)
    detected = detect_tool_format(template)
    if requested == "native" and shipped is None:
        raise UserError("env.tool_format: native needs a tokenizer that ships a response_template; use auto")
    if requested in CHOSEN_BY_TOKENIZER:
        return detected or HERMES, shipped
    fmt = TOOL_FORMATS[check_tool_format(requested)]
    if detected is not None and fmt.call_marker != detected.call_marker:
        raise UserError(
            f"env.tool_format {requested!r} cannot be rendered by this tokenizer's chat template, which writes "
            f"tool calls as {detected.name}; use auto or {detected.name}"
        )
    return fmt, shipped


def describe_tools(tools: list[dict], tool_format: ToolFormat = HERMES, natural: bool = False) -> str:
    """The tools and the call syntax, for chat templates without a native tool format: one compact line for the
    tiny model (every character is a token), or, with ``natural`` (``prompt.style: natural``), a few sentences for an
    instruction-tuned LM: each tool with its arguments and description, and a call written out in the format."""
    if not natural:
        signatures = ", ".join(
            f"{t['function']['name']}({', '.join(t['function'].get('parameters', {}).get('properties', {}))})"
            for t in tools
        )
        return f"Tools: {signatures}. Call: {tool_format.call_example}"
    lines = ["You can call these tools:"]
    for t in tools:
        f = t["function"]
        properties = f.get("parameters", {}).get("properties", {})
        arguments = ", ".join(f"{name}: {spec.get('type', 'any')}" for name, spec in properties.items())
        description = f": {f['description']}" if f.get("description") else ""
        lines.append(f"- {f['name']}({arguments}){description}")
    lines += [
        "To call a tool, reply with the call alone, written exactly like this (JSON, with your own argument values):",
        example_call(tools, tool_format),
        "The result comes back in the next message. Then call a tool again or give your final answer.",
    ]
    return "\n".join(lines)


def example_call(tools: list[dict], tool_format: ToolFormat = HERMES) -> str:
    """A call of the first tool in ``tool_format``, each argument a placeholder naming it (``"<expression>"``)."""
    first = tools[0]["function"]
    placeholder = {name: f"<{name}>" for name in first.get("parameters", {}).get("properties", {})}
    return tool_format.write([(first["name"], placeholder)])
