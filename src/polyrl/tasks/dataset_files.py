"""Checks of a local dataset file before ``datasets`` reads it, so that a malformed file is one line naming
the file, the line and what is wrong — ``datasets`` would raise from deep inside its builder (a byte that is
not UTF-8 only when the row is read, as a traceback), or log a second line of its own.

Each check reads the file once, a line at a time: memory is bounded by the longest line.
"""

from __future__ import annotations

import json
from pathlib import Path

from polyrl.errors import UserError


def check_local_file(path: Path) -> None:
    """A one-line UserError for a text file that is not UTF-8, or a .jsonl line that is not a JSON object."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        _check_json_lines(path)
    elif suffix in (".json", ".csv"):
        _check_utf8(path)


def _not_utf8(path: Path, line: int, column: int, byte: int) -> UserError:
    return UserError(
        f"dataset file {path} line {line} is not UTF-8 text (byte 0x{byte:02x} at column {column}): "
        "re-encode the file as UTF-8"
    )


def _check_json_lines(path: Path) -> None:
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(path, number, exc.start + 1, raw[exc.start]) from None
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except ValueError as exc:
                reason = str(exc).split(":")[0]
                raise UserError(f"dataset file {path} line {number} is not JSON ({reason})") from None
            if not isinstance(value, dict):
                raise UserError(
                    f"dataset file {path} line {number} is a JSON {type(value).__name__}, not an object of columns"
                )


def _check_utf8(path: Path) -> None:
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(path, number, exc.start + 1, raw[exc.start]) from None
