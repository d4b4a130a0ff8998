"""Checks of a local dataset file before ``datasets`` reads it, so that a malformed file is one line naming
the file, the line and what is wrong — ``datasets`` would raise from deep inside its builder (a byte that is
not UTF-8 only when the row is read, as a traceback), log a second line of its own, or (a CSV quote left
open) silently merge rows. And :func:`text_value`: a value polyrl reads as text, decoded when a file stored
it as bytes (a parquet ``binary`` column).

Each check reads the file once, a line at a time: memory is bounded by the longest line (a CSV record).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

from polyrl.errors import UserError


def check_local_file(path: Path) -> None:
    """A one-line UserError for a text file that is not UTF-8, or a .jsonl line that is not a JSON object."""
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        _check_json_lines(path)
    elif suffix == ".json":
        _check_utf8(path)
    elif suffix == ".csv":
        _check_utf8(path)
        _check_csv_quotes(path)


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


def _check_csv_quotes(path: Path) -> None:
    """A quote that opens a field and is not closed where the field ends: the CSV reader ``datasets`` uses
    (pandas) reads on to the next quote, merging rows (a quote at the start of every row halves the rows) or
    failing at the end of the file. Python's strict CSV reader, with the same dialect, names the line."""
    limit = csv.field_size_limit(sys.maxsize)  # a quoted field may be long; only its quotes are checked here
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f, strict=True)
            start = 1
            try:
                for _ in reader:
                    start = reader.line_num + 1
            except csv.Error as exc:
                raise UserError(
                    f"dataset file {path} line {start}: a quote opened there is not closed where its field ends "
                    f'({exc}); close it, or write a quote inside a quoted field as two ("")'
                ) from None
    finally:
        csv.field_size_limit(limit)


def text_value(value: Any, where: str, column: str) -> Any:
    """``value`` as polyrl reads a text column: bytes (a parquet ``binary`` column, also inside a list)
    decoded as UTF-8 — their ``str()`` would be ``"b'23'"`` and score every right answer wrong —, bytes that
    are not UTF-8 a one-line UserError naming ``where`` and ``column``; anything else unchanged."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UserError(
                f"{where}: column {column!r} holds bytes that are not UTF-8 text "
                f"(byte 0x{value[exc.start]:02x} at {exc.start})"
            ) from None
    if isinstance(value, list):
        return [text_value(v, where, column) for v in value]
    return value
