"""Random letter strings for generators, and the one partial-credit rule for answers compared position by position."""

from __future__ import annotations

import string
from collections.abc import Sequence

LOWERCASE = string.ascii_lowercase


def random_letters(rng, length: int, alphabet: str = LOWERCASE) -> str:
    """``length`` letters drawn uniformly from ``alphabet``."""
    return "".join(rng.choice(alphabet) for _ in range(length))


def random_words(rng, letters: int) -> str:
    """Words of 3-7 random lowercase letters, ``letters`` letters in all (spaces not counted)."""
    words, left = [], letters
    while left > 0:
        size = left if left <= 7 else rng.randint(3, min(7, left - 3))
        words.append(random_letters(rng, size))
        left -= size
    return " ".join(words)


def positional_credit(got: Sequence, want: Sequence) -> float | tuple[float, str]:
    """1 for an exact answer; at the right length, half the share of positions right (so it never rivals a
    full solve); 0 at any other length. ``got`` and ``want`` are strings, word lists or flattened grids."""
    if list(got) == list(want):
        return 1.0
    if len(got) != len(want) or not want:
        return 0.0, "wrong"
    right = sum(a == b for a, b in zip(got, want))
    return (0.5 * right / len(want), "partial") if right else (0.0, "wrong")
