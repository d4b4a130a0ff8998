"""A reward for end-to-end training tests of untrained models, whose answers the verifiers score 0."""

from __future__ import annotations

import zlib


def distinct_text(response: str) -> float:
    """A number in [0, 1) fixed by the completion's text: two completions of a group differ in reward whenever their
    texts differ (random completions nearly always do), so every group has an advantage to train on. A reward of
    the text's length parity left a group without signal half the time (two completions of equal parity), and a
    2-step test run without any update now and then."""
    return zlib.crc32(response.encode()) / 2**32
