"""Reasoning models: the thinking block of a response, kept apart from the part that holds the answer.

A reasoning model (DeepSeek-R1, Qwen3, …) writes ``<think>…</think>`` before its answer; some chat templates
open the block in the prompt, so a response may start inside it and show only the closing tag. The answer
counts only after the block: an ``<answer>`` written while thinking is never extracted. Every function here
is linear in the response length.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_THINK_TAGS = ("<think>", "</think>")


@dataclass(frozen=True)
class ThinkSplit:
    """A response cut at the end of its thinking block."""

    thought: str
    """What the model wrote while thinking (the tags excluded; everything when the block never closes)."""
    answer_part: str | None
    """The text after the block, where the answer is looked for; None when a block opens and never closes."""
    well_formed: bool
    """Exactly one block, closed, at the start of the response (or opened by the prompt and closed once)."""


def split_thinking(response: str, tags: tuple[str, str] = DEFAULT_THINK_TAGS) -> ThinkSplit:
    """Cut ``response`` after the last closing tag.

    - ``<think>a</think>b`` -> thought ``a``, answer part ``b``, well formed;
    - ``a</think>b`` (the template opened the block) -> the same;
    - ``b`` (no tags: the model did not think) -> no thought, answer part ``b``, not well formed;
    - ``<think>a`` (never closed, e.g. truncated) -> thought ``a``, no answer part.
    """
    open_tag, close_tag = tags
    end = response.rfind(close_tag)
    if end < 0:
        start = response.find(open_tag)
        if start < 0:
            return ThinkSplit("", response, False)
        return ThinkSplit(response[start + len(open_tag) :], None, False)
    head = response[:end]
    lead = head.lstrip()
    opened_here = lead.startswith(open_tag)
    thought = lead[len(open_tag) :] if opened_here else head
    single = response.count(close_tag) == 1 and thought.count(open_tag) == 0
    return ThinkSplit(thought, response[end + len(close_tag) :], single)


def thinking_length(response: str, tags: tuple[str, str] = DEFAULT_THINK_TAGS) -> int:
    """Characters written while thinking (for a separate length penalty or budget on the reasoning)."""
    return len(split_thinking(response, tags).thought)


def think_format(response: str, tags: tuple[str, str] = DEFAULT_THINK_TAGS) -> float:
    """1.0 when the response thinks in exactly one closed block before answering, else 0.0 (a format reward)."""
    return float(split_thinking(response, tags).well_formed)
