"""Small, total parsers shared by built-in verifiers."""

from __future__ import annotations

import re

_INT_RE = re.compile(r"[+-]?\d{1,400}")


def parse_int(text: str) -> int:
    """An integer written plainly (commas/underscores/spaces between digits allowed). Raises ValueError."""
    s = text.strip().replace(",", "").replace("_", "").replace(" ", "")
    if not _INT_RE.fullmatch(s):
        raise ValueError(f"not an integer: {text[:40]!r}")
    return int(s)


def parse_int_list(text: str, max_items: int = 10_000) -> list[int]:
    """Integers separated by commas and/or whitespace, optionally in brackets. Raises ValueError."""
    s = text.strip()
    if s[:1] in "[(" and s[-1:] in "])":
        s = s[1:-1]
    parts = [p for p in re.split(r"[,\s]+", s) if p]
    if len(parts) > max_items:
        raise ValueError("too many items")
    return [parse_int(p) for p in parts]
