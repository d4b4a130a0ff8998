"""Shared answer extraction: one place decides what part of a response is the answer.

Format compliance is reported separately from correctness, so that a format reward can be given on its
own. Every function here is total: any string in, a result out, in bounded time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from polyrl.tasks.thinking import split_thinking

AnswerStyle = Literal["tags", "boxed", "last_line"]
DEFAULT_ANSWER_STYLE: AnswerStyle = "tags"
"""How responses mark answers wherever none is given: a task's answer format, an eval suite's ``answer_format``
and ``polyrl tasks score --answer-format`` (a suite scores a trained policy as its tasks taught it)."""

#: Responses longer than this are not searched; they get reason ``too_long``.
MAX_RESPONSE_CHARS = 200_000
#: Extracted answers longer than this are rejected as ``malformed`` before any task parses them.
MAX_ANSWER_CHARS = 20_000

_OPEN_TAG, _CLOSE_TAG = "<answer>", "</answer>"


@dataclass(frozen=True)
class Extraction:
    """What the answer format found in a response."""

    answer: str | None
    """The extracted answer text (stripped), or None when nothing was found."""
    format_ok: bool
    """True when the response follows the format exactly once (e.g. one well-formed answer tag)."""
    reason: str
    """``ok``, ``no_answer``, ``multiple_answers``, ``unclosed_tag``, ``unclosed_think`` (reasoning models),
    ``too_long`` or ``empty_answer``."""


@dataclass(frozen=True)
class AnswerFormat:
    """How answers are marked in responses: ``<answer>…</answer>`` (default), ``\\boxed{…}`` or the last line."""

    style: AnswerStyle = DEFAULT_ANSWER_STYLE
    think_tags: tuple[str, str] | None = None
    """Reasoning models: the thinking block these tags delimit is cut off before the answer is looked for."""

    def instruction(self) -> str:
        """One sentence for the prompt telling the model how to mark its answer."""
        if self.style == "tags":
            return "Give your final answer inside <answer></answer> tags."
        if self.style == "boxed":
            return "Give your final answer inside \\boxed{}."
        return "Give your final answer alone on the last line."

    def wrap(self, answer: str) -> str:
        """Write ``answer`` in this format (used for reference solutions)."""
        if self.style == "tags":
            return f"<answer>{answer}</answer>"
        if self.style == "boxed":
            return f"\\boxed{{{answer}}}"
        return answer

    def extract(self, response: str) -> Extraction:
        if not isinstance(response, str):
            return Extraction(None, False, "no_answer")
        if len(response) > MAX_RESPONSE_CHARS:
            return Extraction(None, False, "too_long")
        if self.think_tags is not None:
            response = split_thinking(response, self.think_tags).answer_part
            if response is None:
                return Extraction(None, False, "unclosed_think")
        if self.style == "tags":
            return _extract_tags(response)
        if self.style == "boxed":
            return _extract_boxed(response)
        return _extract_last_line(response)


def _finish(answer: str, format_ok: bool, reason: str = "ok") -> Extraction:
    answer = answer.strip()
    if not answer:
        return Extraction(None, False, "empty_answer")
    return Extraction(answer, format_ok, reason)


def _tagged_spans(response: str) -> list[str]:
    """The texts between each ``<answer>`` and the next ``</answer>``, left to right.

    Two ``str.find`` scans that only move forward: linear in the length however many tags are left
    unclosed (a backtracking regex such as ``<answer>(.*?)</answer>`` is quadratic there).
    """
    spans, pos = [], 0
    while True:
        start = response.find(_OPEN_TAG, pos)
        if start < 0:
            return spans
        start += len(_OPEN_TAG)
        end = response.find(_CLOSE_TAG, start)
        if end < 0:
            return spans
        spans.append(response[start:end])
        pos = end + len(_CLOSE_TAG)


def _extract_tags(response: str) -> Extraction:
    matches = _tagged_spans(response)
    if not matches:
        if _OPEN_TAG in response:
            return Extraction(None, False, "unclosed_tag")
        return Extraction(None, False, "no_answer")
    # The last answer counts (models often restate); several answers break the format.
    answer = matches[-1]
    if _OPEN_TAG in answer:
        return Extraction(None, False, "malformed")
    if len(matches) > 1:
        return _finish(answer, False, "multiple_answers")
    return _finish(answer, True)


def _extract_boxed(response: str) -> Extraction:
    start = response.rfind("\\boxed{")
    if start < 0:
        return Extraction(None, False, "no_answer")
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(response)):
        c = response[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                several = response.count("\\boxed{") > 1
                return _finish(response[i:j], not several, "multiple_answers" if several else "ok")
    return Extraction(None, False, "unclosed_tag")


def _extract_last_line(response: str) -> Extraction:
    lines = [ln for ln in response.strip().splitlines() if ln.strip()]
    if not lines:
        return Extraction(None, False, "no_answer")
    return _finish(lines[-1], True)
