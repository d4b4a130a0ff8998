"""A verifier's judgment of one response, and the reasons an isolated verify call failed. Its own module, so that
the verifier pool and its worker process depend on it without depending on the task classes."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VERIFIER_ERROR", "VERIFIER_TIMEOUT", "Verdict"]

VERIFIER_TIMEOUT = "verifier_timeout"
"""Verdict reason (score 0): an isolated verify call ran past its time limit."""
VERIFIER_ERROR = "verifier_error"
"""Verdict reason (score 0): the verifier crashed, ran out of memory, or its task could not be loaded."""


@dataclass(frozen=True)
class Verdict:
    """The verifier's judgment of one response."""

    score: float
    """In [0, 1]; partial credit where the task has a natural notion of it."""
    correct: bool
    reason: str
    """Machine-readable: ``correct``, ``partial``, ``wrong``, ``malformed``, ``no_answer``, ``unclosed_tag``,
    ``verifier_timeout``, ``verifier_error``…"""
    format_ok: bool = False
    """The response followed the answer format (independent of correctness)."""
    answer: str | None = None
    """The extracted answer, if any."""
