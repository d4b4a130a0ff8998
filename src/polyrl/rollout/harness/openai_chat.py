"""The chat-completions wire format of the harness endpoint: the request (messages with tool calls and tool
results, tool definitions), the response (an assistant message whose tool calls are parsed from the policy's
text) and the normalized form in which two renderings of the same message compare equal."""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from polyrl.envs.tool_formats import ToolFormat, call_id
from polyrl.serve.schema import check_no_lone_surrogate


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str | None = None
    type: Literal["function"] = "function"
    function: ToolFunction


class HarnessMessage(BaseModel):
    """One message of a request, as OpenAI's API takes it for a text model: a role the chat template knows,
    and text content (a string, or a list of ``text`` parts); only an assistant turn may have none."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool"]
    content: Any = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @field_validator("content")
    @classmethod
    def _text_content(cls, content: Any, info: ValidationInfo) -> Any:
        if content is None:
            if info.data.get("role") != "assistant":
                raise ValueError(f"a {info.data.get('role')} message needs content (a string or a list of text parts)")
            return content
        if isinstance(content, list):
            for k, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                if kind != "text":
                    raise ValueError(f"part {k} is {kind!r}: the policy reads text only (parts of type 'text')")
                if not isinstance(part.get("text"), str):
                    raise ValueError(f"part {k} is a text part without a string 'text'")
            text = text_of(content)
        elif isinstance(content, str):
            text = content
        else:
            raise ValueError(f"content must be a string or a list of text parts, not {type(content).__name__}")
        check_no_lone_surrogate(text)
        return content


def misplaced_tool_message(messages: list[dict[str, Any]]) -> int | None:
    """The index of the first ``tool`` message that answers no call (the messages before it, back to the last
    non-tool one, hold no assistant turn with ``tool_calls``), or None."""
    called = False
    for i, m in enumerate(messages):
        if m.get("role") == "tool":
            if not called:
                return i
        else:
            called = m.get("role") == "assistant" and bool(m.get("tool_calls"))
    return None


class HarnessRequest(BaseModel):
    """The part of an OpenAI chat-completions request the harness reads. Sampling fields (temperature,
    top_p, seed…) are accepted and ignored: in training the policy samples as the RL config says, since the
    objective assumes it, and evaluation is greedy."""

    model_config = ConfigDict(extra="ignore")

    messages: list[HarnessMessage] = Field(min_length=1)
    model: str | None = None
    """The model the agent names: whatever it is, the run's policy answers (the rollout says so once)."""
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = Field(1, ge=1, le=1)
    stream: bool = False
    logprobs: bool = False
    """Return each generated token's behaviour log-prob (``choices[0].logprobs.content``)."""

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def text_of(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def normalized(message: dict[str, Any]) -> tuple:
    """What identifies a message for the token ledger: role, text, and for an assistant turn its calls
    (name and parsed arguments; ids and JSON spacing are the client's business)."""
    role = message.get("role")
    calls = tuple(
        (
            c.get("function", {}).get("name"),
            json.dumps(_arguments(c.get("function", {}).get("arguments")), sort_keys=True),
        )
        for c in message.get("tool_calls") or ()
    )
    text = text_of(message.get("content"))
    return (role, text.strip() if role == "assistant" else text, calls)


def template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message as chat templates read it: text content, and ``tool_calls`` arguments as objects."""
    out = {k: v for k, v in message.items() if v is not None}
    out["content"] = text_of(message.get("content"))
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {
                **c,
                "function": {**c.get("function", {}), "arguments": _arguments(c.get("function", {}).get("arguments"))},
            }
            for c in message["tool_calls"]
        ]
    return out


def assistant_message(
    text: str, tool_format: ToolFormat, response_template: dict | None, turn: int
) -> tuple[dict, int]:
    """The policy's turn as an OpenAI assistant message: the calls ``tool_format`` parses out of ``text``
    (well-formed ones; a malformed call stays in the content) and the text before the first call; and how many
    malformed calls there were (the episode's tool errors)."""
    parsed = tool_format.parse(text, response_template) if text else []
    calls = [c for c in parsed if c.error is None]
    content = text
    if calls and tool_format.call_marker in text:
        content = text[: text.index(tool_format.call_marker)].strip()
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id(c, turn, i),
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for i, c in enumerate(calls)
        ]
    return message, len(parsed) - len(calls)


def is_error_result(message: dict[str, Any]) -> bool:
    """A tool result that reports a failure: its text begins with ``error`` (the convention polyrl's own tools
    follow, ``error: <what went wrong>``; the chat format has no error flag)."""
    return message.get("role") == "tool" and text_of(message.get("content")).lstrip().lower().startswith("error")


def completion_body(
    message: dict, finished: bool, prompt_tokens: int, completion_tokens: int, model: str, logprobs: list | None = None
) -> dict:
    """A ``chat.completion`` object with one choice (``logprobs``: its ``logprobs.content`` entries)."""
    reason = "length" if not finished else ("tool_calls" if message.get("tool_calls") else "stop")
    return {
        "id": f"chatcmpl-polyrl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reason,
                "logprobs": None if logprobs is None else {"content": logprobs},
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_chunks(body: dict) -> list[dict]:
    """The same completion as ``chat.completion.chunk`` objects (one delta, then the finish reason), for a
    client that asked ``stream: true``."""
    choice = body["choices"][0]
    base = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    delta = {"role": "assistant", "content": choice["message"]["content"]}
    if "tool_calls" in choice["message"]:
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(choice["message"]["tool_calls"])]
    return [
        base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
