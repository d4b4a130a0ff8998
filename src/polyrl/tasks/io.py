"""Problem files: export to jsonl or parquet, load back, and score files (problems + a ``response`` column).

One row per problem: :meth:`Problem.to_dict` with ``answer`` and ``params`` written as JSON strings, because
tasks disagree on their types (an int here, a grid there) and a parquet column needs one type. Both formats
load with ``datasets.load_dataset("json" | "parquet", data_files=...)`` and round-trip exactly through
:func:`load_problems`. Files are written to a temporary name and renamed, so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from polyrl.errors import UserError
from polyrl.tasks.base import Problem, Verdict
from polyrl.tasks.dataset_files import text_value

FORMATS = (".jsonl", ".parquet")
JSON_COLUMNS = ("answer", "params")
"""Columns stored as JSON text so every row has the same schema."""

_STRING_COLUMNS = ("id", "task", "question", "prompt", "answer", "solution", "split", "params")
IMAGES = "images"
"""The column of a problem's images (present only in files holding a problem with images)."""


def file_format(path: Path) -> str:
    """``.jsonl`` or ``.parquet`` for ``path`` (``.json`` counts as JSON lines); anything else is a UserError."""
    suffix = path.suffix.lower()
    if suffix == ".json":
        suffix = ".jsonl"
    if suffix not in FORMATS:
        raise UserError(f"{path}: unknown file type {path.suffix or '(none)'!r}; use .jsonl or .parquet")
    return suffix


def problem_row(problem: Problem, response: str | None = None) -> dict[str, Any]:
    """The file row for ``problem`` (and its ``response`` in a score file); ``images`` as base64 PNG text."""
    row = problem.to_dict()
    for key in JSON_COLUMNS:
        row[key] = json.dumps(row[key], ensure_ascii=False)
    if response is not None:
        row["response"] = response
    return row


def _features(rows: list[Mapping[str, Any]]):
    """An explicit schema, so an all-null column (e.g. ``solution``) keeps its type in parquet; ``images`` a list of
    ``datasets`` ``Image`` values."""
    from datasets import Features, Image, Value

    kinds = {name: Value("string") for name in (*_STRING_COLUMNS, "response", "reason")}
    kinds.update(seed=Value("int64"), difficulty=Value("float64"), score=Value("float64"))
    kinds.update(correct=Value("bool"), format_ok=Value("bool"))
    kinds[IMAGES] = [Image()]
    names = _column_names(rows) if rows else list(_STRING_COLUMNS)
    return Features({n: kinds.get(n, Value("string")) for n in names})


def _column_names(rows: list[Mapping[str, Any]]) -> list[str]:
    """The first row's columns, and ``images`` where any row has images (rows without them hold an empty list)."""
    names = list(rows[0])
    if IMAGES not in names and any(IMAGES in row for row in rows):
        names.insert(names.index("id") if "id" in names else len(names), IMAGES)
    return names


def _parquet_rows(rows: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """``rows`` as the parquet writer takes them: every row with every column, images as PNG bytes."""
    if not any(IMAGES in row for row in rows):
        return rows
    from polyrl.tasks.images import encoded_image

    return [
        {**row, IMAGES: [{"bytes": encoded_image(v), "path": None} for v in row.get(IMAGES) or []]} for row in rows
    ]


def write_rows(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``rows`` (flat dicts, same keys) to ``path`` (.jsonl or .parquet), atomically."""
    path = Path(path)
    fmt = file_format(path)
    rows = list(rows)
    if not path.parent.exists():
        raise UserError(f"{path}: directory {path.parent} does not exist")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if fmt == ".parquet":
            import datasets

            datasets.disable_progress_bars()
            datasets.Dataset.from_list(_parquet_rows(rows), features=_features(rows)).to_parquet(tmp)
        else:
            # JSON lines written directly: the same records datasets writes, but `Dataset.to_json` goes
            # through pandas, which rounds floats to 10 digits and would break the exact round trip.
            with open(tmp, "w", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a .jsonl or .parquet file; unreadable or malformed files raise one-line UserErrors."""
    path = Path(path)
    fmt = file_format(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    if fmt == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # pyarrow raises several types for corrupt files
            raise UserError(f"{path}: not a readable parquet file ({type(exc).__name__}: {str(exc)[:120]})") from None
        # every column polyrl reads from a problem file is text or a number (binary columns are UTF-8 text), but the
        # images, which stay PNG bytes
        return [
            {k: v if k == IMAGES else text_value(v, _where(path, i), k) for k, v in row.items()}
            for i, row in enumerate(rows)
        ]
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UserError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise UserError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
                rows.append(row)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 text file") from None
    return rows


def _where(path: Path, index: int) -> str:
    # jsonl rows are reported by line (blank lines aside, row i is line i+1); parquet rows by index
    return f"{path}:{index + 1}" if path.suffix.lower() != ".parquet" else f"{path}: row {index}"


def row_problem(row: Mapping[str, Any], where: str) -> Problem:
    """The Problem in a file row (inverse of :func:`problem_row`)."""
    values = dict(row)
    for key in JSON_COLUMNS:
        if isinstance(values.get(key), str):
            try:
                values[key] = json.loads(values[key])
            except json.JSONDecodeError:
                raise UserError(f"{where}: column {key!r} is not valid JSON text") from None
    try:
        problem = Problem.from_dict(values)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
    except TypeError as exc:
        raise UserError(f"{where}: malformed problem record ({exc})") from None
    if not isinstance(problem.params, dict):
        raise UserError(f"{where}: column 'params' must hold a JSON object")
    return problem


def export_problems(path: str | os.PathLike, problems: Iterable[Problem]) -> Path:
    """Write ``problems`` to ``path`` (.jsonl or .parquet)."""
    return write_rows(path, (problem_row(p) for p in problems))


def load_problems(path: str | os.PathLike) -> list[Problem]:
    """The problems in a file written by :func:`export_problems` (or any file with the same columns)."""
    path = Path(path)
    return [row_problem(row, _where(path, i)) for i, row in enumerate(read_rows(path))]


def load_responses(path: str | os.PathLike) -> list[tuple[Problem, str]]:
    """``(problem, response)`` pairs from a score file: problem rows plus a string ``response`` column."""
    path = Path(path)
    pairs = []
    for i, row in enumerate(read_rows(path)):
        response = row.get("response")
        if not isinstance(response, str):
            raise UserError(f"{_where(path, i)}: needs a string 'response' column")
        pairs.append((row_problem(row, _where(path, i)), response))
    return pairs


def verdict_row(problem: Problem, verdict: Verdict) -> dict[str, Any]:
    """One row of a verdicts file."""
    return {
        "id": problem.id,
        "task": problem.task,
        "score": verdict.score,
        "correct": verdict.correct,
        "reason": verdict.reason,
        "format_ok": verdict.format_ok,
        "answer": verdict.answer,
    }
