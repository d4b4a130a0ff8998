"""The per-episode token ledger: every request of one agent episode mapped onto token ids, so that each
assistant turn is exactly the ids the policy sampled and nothing is re-tokenized.

A request whose messages begin with everything a segment of the ledger already covers (its first request's
messages, each reply polyrl sent and each message the client added since) *extends* that segment: the new
messages after the last reply are rendered as the difference the chat template makes after an assistant
turn (:meth:`polyrl.rollout.chat.ChatCodec.between_turns`, the same as an environment's observation)
and appended with policy mask 0; the policy then continues from the segment's ids. A request that does not
extend any segment — the client edited, dropped or reordered earlier messages, or sent two requests at once
— opens a new segment rendered whole from its messages. Each segment becomes one trajectory of the episode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from polyrl.envs.tool_formats import describe_tools
from polyrl.rollout.chat import ChatCodec, user_text
from polyrl.rollout.harness.openai_chat import is_error_result, normalized, template_message, text_of


@dataclass
class Segment:
    """A chain of requests that each extend the one before: one token sequence."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    policy_mask: list[int] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    """``[start, end)`` of each policy turn within ``response_ids``."""
    seen: list[tuple] = field(default_factory=list)
    """The normalized messages the ids cover: the last request's and the reply polyrl sent."""
    finished: bool = True
    """The last policy turn ended by itself (False: cut by the token limit)."""
    text: str = ""
    busy: bool = False
    """A request on this segment is waiting for its completion."""
    tool_calls: int = 0
    """Tool calls the policy wrote in this segment's turns (malformed ones included)."""
    tool_errors: int = 0
    """Malformed calls, and tool results the client sent back that report an error (:func:`is_error_result`)."""
    prompt_text: str | None = None
    """The user messages of the request that opened the segment: what the policy read."""

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids


@dataclass
class Turn:
    """One request placed on the ledger: the segment it continues and the environment ids it adds first."""

    segment: Segment
    env_ids: list[int]
    messages: list[dict[str, Any]]
    added: list[dict[str, Any]] = field(default_factory=list)
    """The messages the request added to the segment since its last reply (tool results, a user's turn)."""

    @property
    def prompt(self) -> list[int]:
        return self.segment.ids + self.env_ids


class EpisodeLedger:
    def __init__(self, codec: ChatCodec):
        self.codec = codec
        self.segments: list[Segment] = []
        self.history_edits = 0
        """Requests that opened a new segment although one existed (edited history, parallel requests)."""
        self.last_text = ""
        """The text of the latest completion (what a verifier reads when the harness returns no reward)."""

    def place(self, messages: list[dict[str, Any]], tools: list[dict] | None) -> Turn:
        """Where a request's completion goes: the longest idle segment it extends, or a new segment."""
        norm = [normalized(m) for m in messages]
        extendable = [
            s
            for s in self.segments
            if not s.busy and s.seen and len(norm) > len(s.seen) and norm[: len(s.seen)] == s.seen
        ]
        added: list[dict[str, Any]] = []
        if extendable:
            segment = max(extendable, key=lambda s: len(s.seen))
            added = [template_message(m) for m in messages[len(segment.seen) :]]
            env_ids = self.codec.between_turns(added, segment.finished)
        else:
            self.history_edits += bool(self.segments)
            shown = user_text([template_message(m) for m in messages])
            segment, env_ids = Segment(self.render(messages, tools), prompt_text=shown), []
            self.segments.append(segment)
        segment.busy = True
        return Turn(segment, env_ids, messages, added)

    def render(self, messages: list[dict[str, Any]], tools: list[dict] | None) -> list[int]:
        """Prompt ids of a whole conversation with the generation prompt; tools go through the chat template
        when it has a native tool format, else they are listed in the system message."""
        codec, tok = self.codec, self.codec.tok
        msgs = [template_message(m) for m in messages]
        if tools and not codec.native_tools:
            listing = describe_tools(tools, codec.tool_format, codec.natural)
            if msgs[0]["role"] == "system":
                msgs[0] = {**msgs[0], "content": f"{msgs[0]['content']}\n{listing}"}
            else:
                msgs.insert(0, {"role": "system", "content": listing})
        if not codec.use_chat:
            return tok("\n".join(text_of(m.get("content")) for m in msgs) + "\n").input_ids
        kwargs = {**codec.template_kwargs, **({"tools": tools} if tools and codec.native_tools else {})}
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kwargs)
        return tok(text, add_special_tokens=False).input_ids

    def record(
        self, turn: Turn, completion_ids: list[int], text: str, finished: bool, reply: dict, malformed: int = 0
    ) -> None:
        """The policy's completion for ``turn``: environment ids (mask 0), then the sampled ids (mask 1); and the
        tool use it completes: the results the request sent back, the calls in ``reply`` and ``malformed`` ones."""
        s = turn.segment
        s.tool_errors += sum(is_error_result(m) for m in turn.added) + malformed
        s.tool_calls += len(reply.get("tool_calls") or ()) + malformed
        s.response_ids += turn.env_ids
        s.policy_mask += [0] * len(turn.env_ids)
        start = len(s.response_ids)
        s.response_ids += completion_ids
        s.policy_mask += [1] * len(completion_ids)
        s.turn_spans.append((start, len(s.response_ids)))
        s.text += text
        s.finished = finished
        self.last_text = text
        s.seen = [normalized(m) for m in turn.messages] + [normalized(reply)]
        s.busy = False

    def release(self, turn: Turn) -> None:
        """A request that got no completion: its segment is as it was."""
        turn.segment.busy = False
