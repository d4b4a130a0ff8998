"""Where a dataset task's rows come from: loading a file or hub dataset, column mapping, answer processing,
the train/eval split by prompt hash, and difficulty buckets. The Task itself is :mod:`polyrl.tasks.dataset`."""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from polyrl.errors import UserError
from polyrl.tasks.dataset_files import check_local_file, text_value
from polyrl.tasks.dataset_images import ImageRef, row_images, undecoded_images
from polyrl.tasks.images import MAX_IMAGE_PIXELS

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class DatasetSpec(BaseModel):
    """Where a dataset task's rows come from, which columns mean what, and how answers are checked."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="A local .jsonl/.json/.parquet/.csv file, or a name datasets.load_dataset accepts.")
    subset: str | None = Field(None, description="Hub datasets: the configuration name (e.g. 'main' for gsm8k).")
    split: str = Field("train", description="Hub datasets: the split the training rows come from.")
    eval_path: str | None = Field(None, description="A separate file of eval rows (instead of eval_fraction).")
    eval_split: str | None = Field(None, description="Hub datasets: a split of eval rows (e.g. 'test').")
    eval_fraction: float = Field(
        0.1, gt=0, lt=1, description="Share of rows held out for eval, by a hash of the prompt (without eval_path)."
    )
    prompt: str = Field("question", description="Column holding the question shown to the policy.")
    answer: str = Field("answer", description="Column holding the answer (processed by answer_after/answer_regex).")
    answer_after: str | None = Field(
        None, description="Keep the text after the last occurrence of this marker (GSM8K: '####')."
    )
    answer_regex: str | None = Field(None, description="Keep group 1 (else the match) of this regex's first match.")
    choices: str | None = Field(
        None, description="Column of option lists: shown as A., B., …; the answer becomes a letter."
    )
    images: str | None = Field(
        None,
        description="Column of each row's image, or list of images: a path relative to the file's folder, image "
        "bytes, a data: URI, or a datasets Image feature.",
    )
    max_image_pixels: int = Field(
        MAX_IMAGE_PIXELS, ge=1, le=64 * 1024 * 1024, description="Most pixels (width x height) an image may have."
    )
    difficulty_column: str | None = Field(None, description="Column of per-row difficulty (larger is harder).")
    difficulty_buckets: int = Field(5, ge=1, le=100, description="Most buckets the difficulty knob chooses from.")
    verifier: str = Field(
        "normalized",
        description="exact, normalized, numeric, choice, regex, math, or 'package.module:function'.",
    )
    verifier_options: dict[str, Any] = Field(
        default_factory=dict, description="Options of the verifier, e.g. {rel_tol: 0.01} for numeric."
    )
    max_prompt_chars: int = Field(
        1000, ge=1, description="Longest prompt (with its choices) a row may have; longer ones are long_rows."
    )
    max_answer_chars: int = Field(
        500, ge=1, description="Longest processed answer a row may have; rows with a longer one are dropped."
    )
    long_rows: Literal["drop", "truncate"] = Field(
        "drop", description="A row over max_prompt_chars: dropped, or its prompt cut to it (counted either way)."
    )

    @field_validator("answer_regex")
    @classmethod
    def _compiles(cls, pattern):
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"answer_regex {pattern!r} is not a valid regular expression: {exc}") from None
        return pattern

    def key(self) -> str:
        return json.dumps(self.model_dump(), sort_keys=True)


@dataclass(frozen=True)
class Row:
    index: int
    """Row number in its file (0-based)."""
    question: str
    target: str
    difficulty: float | None
    images: tuple[ImageRef, ...] = ()
    """Where the row's images are: their bytes, or the file they are in (decoded when a problem is served)."""
    images_digest: str | None = None
    """SHA-256 of the images' pixels (with the question, what decides the row's split), None without images."""

    @property
    def split_key(self) -> str:
        """What decides the row's split: the question, and the pixels of its images when it has any."""
        return self.question if self.images_digest is None else f"{self.question}\x00{self.images_digest}"


def _load_table(path: str, spec: DatasetSpec, split: str):
    """The rows of ``path`` as a ``datasets.Dataset``; any failure is a one-line UserError naming ``path``."""
    import datasets

    datasets.disable_progress_bars()
    local = Path(path)
    suffix = local.suffix.lower()
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its "Failed to read file" would be a 2nd line
    try:
        if suffix in LOCAL_FORMATS:
            if not local.is_file():
                raise UserError(f"dataset file {path} does not exist")
            if local.stat().st_size == 0:
                raise UserError(f"dataset file {path} is empty")
            check_local_file(local)
            return datasets.load_dataset(LOCAL_FORMATS[suffix], data_files=str(local), split="train")
        if local.is_dir() and (local / "dataset_info.json").exists():
            return datasets.load_from_disk(str(local))
        return datasets.load_dataset(path, spec.subset, split=split)
    except UserError:
        raise
    except Exception as exc:
        while exc.__cause__ is not None:  # datasets wraps the reader's error in "An error occurred while …"
            exc = exc.__cause__
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot load dataset {path}: {first[:300]}") from None
    finally:
        datasets.logging.set_verbosity(verbosity)


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, Decimal) and value.is_finite():  # a parquet decimal column: its digits, as a float's
        text = format(value, "f")  # exact, never in exponent form; then no trailing zeros, as 2.0 is "2"
        text = text.rstrip("0").rstrip(".") if "." in text else text
        return "0" if text == "-0" else text
    if isinstance(value, (str, int, float, bool)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=str)


_NUMBER_IN_TEXT = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _difficulty_value(value: Any, where: str) -> float:
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    match = _NUMBER_IN_TEXT.search(value) if isinstance(value, str) else None
    if match is None:
        raise UserError(f"{where}: difficulty {str(value)[:40]!r} is not a number")
    return float(match.group())


def _target(raw: Any, spec: DatasetSpec, options: list[str] | None, where: str) -> str:
    """The processed answer of one row; an answer that cannot be processed is a UserError naming the row."""
    text = _text(raw).strip() if raw is not None else ""
    if spec.answer_after is not None:
        if spec.answer_after not in text:
            raise UserError(f"{where}: answer has no {spec.answer_after!r} marker: {text[:60]!r}")
        text = text.rsplit(spec.answer_after, 1)[1].strip()
    if spec.answer_regex is not None:
        match = re.search(spec.answer_regex, text)
        if match is None:
            raise UserError(f"{where}: answer_regex {spec.answer_regex!r} does not match {text[:60]!r}")
        text = (match.group(1) if match.groups() else match.group()).strip()
    if options is not None:
        text = _choice_target(raw if isinstance(raw, int) and not isinstance(raw, bool) else text, options, where)
    if not text:
        raise UserError(f"{where}: answer is empty")
    return text


def _choice_target(answer: Any, options: list[str], where: str) -> str:
    """The option letter of a multiple-choice answer given as an index, a letter, or the option's text."""
    if isinstance(answer, int):
        if not 0 <= answer < len(options):
            raise UserError(f"{where}: answer index {answer} is outside the {len(options)} choices")
        return LETTERS[answer]
    if len(answer) == 1 and answer.upper() in LETTERS[: len(options)]:
        return answer.upper()
    if answer in options:
        return LETTERS[options.index(answer)]
    raise UserError(f"{where}: answer {answer[:60]!r} is neither a choice letter nor one of the choices")


def _question(raw: Any, options: list[str] | None, where: str) -> str:
    text = _text(raw).strip() if raw is not None else ""
    if not text:
        raise UserError(f"{where}: prompt is empty")
    if options is None:
        return text
    return text + "\n" + "\n".join(f"{LETTERS[i]}. {option}" for i, option in enumerate(options))


def _options(raw: Any, where: str) -> list[str]:
    if not isinstance(raw, (list, tuple)) or not 2 <= len(raw) <= len(LETTERS):
        raise UserError(f"{where}: choices must be a list of 2 to {len(LETTERS)} options, got {str(raw)[:60]!r}")
    return [_text(o) for o in raw]


def load_rows(path: str, spec: DatasetSpec, split: str) -> list[Row]:
    """Every row of ``path`` processed: question (with lettered choices), target answer, difficulty. Rows over
    the spec's length budget are dropped or cut (and counted on stderr), so the rows held in memory, and every
    sequence trained on, are bounded by the config whatever the file holds."""
    table = _load_table(path, spec, split)
    if len(table) == 0:
        raise UserError(f"dataset {path} has no rows")
    wanted = [spec.prompt, spec.answer, spec.choices, spec.difficulty_column, spec.images]
    missing = [c for c in wanted if c is not None and c not in table.column_names]
    if missing:
        raise UserError(f"dataset {path} has no column {missing[0]!r}; its columns: {', '.join(table.column_names)}")
    if spec.images is not None:
        table = undecoded_images(table, spec.images)
    rows, long = [], {"prompt": 0, "answer": 0}
    for i, record in enumerate(_records(table, path)):
        where = f"{path} row {i}"
        images = record[spec.images] if spec.images is not None else None
        record = {c: text_value(record[c], where, c) for c in wanted if c is not None and c != spec.images}
        options = _options(record[spec.choices], where) if spec.choices else None
        question = _question(record[spec.prompt], options, where)
        if len(question) > spec.max_prompt_chars:
            long["prompt"] += 1
            if spec.long_rows == "drop":
                continue
            question = question[: spec.max_prompt_chars]
        target = _target(record[spec.answer], spec, options, where)
        if len(target) > spec.max_answer_chars:
            long["answer"] += 1
            continue
        _check_target(target, spec, where)
        difficulty = None
        if spec.difficulty_column is not None:
            difficulty = _difficulty_value(record[spec.difficulty_column], where)
        refs, digest = row_images(images, _image_root(path), f"{where}: column {spec.images!r}", spec.max_image_pixels)
        rows.append(Row(i, question, target, difficulty, refs, digest))
    if long["prompt"] or long["answer"]:
        _report_long_rows(path, spec, len(table), long)
    if not rows:
        raise UserError(
            f"dataset {path}: none of its {len(table)} rows is within max_prompt_chars={spec.max_prompt_chars} "
            f"and max_answer_chars={spec.max_answer_chars}"
        )
    return rows


def _image_root(path: str) -> Path | None:
    """The folder image paths of a local dataset are read relative to (and may not leave); None for a hub dataset."""
    local = Path(path)
    if local.suffix.lower() in LOCAL_FORMATS:
        return local.parent
    return local if local.is_dir() else None


def _records(table, path: str):
    """The table's rows as dicts; text that is not UTF-8 (decoded only now, as each row is read) is a UserError."""
    try:
        yield from table
    except UnicodeDecodeError as exc:
        raise UserError(f"dataset {path} holds text that is not UTF-8 (byte 0x{exc.object[exc.start]:02x})") from None


def _report_long_rows(path: str, spec: DatasetSpec, total: int, long: dict[str, int]) -> None:
    parts = []
    if long["prompt"]:
        cut = "dropped" if spec.long_rows == "drop" else "prompt truncated"
        parts.append(f"{long['prompt']} with a prompt over max_prompt_chars={spec.max_prompt_chars} ({cut})")
    if long["answer"]:
        parts.append(f"{long['answer']} with an answer over max_answer_chars={spec.max_answer_chars} (dropped)")
    print(f"polyrl: warning: dataset {path}: {total} rows, {'; '.join(parts)}", file=sys.stderr)


def _check_target(target: str, spec: DatasetSpec, where: str) -> None:
    """Answers the verifier could never match are caught when rows load, not as silent zero rewards."""
    if spec.verifier == "numeric":
        from polyrl.tasks.verifiers import parse_number

        try:
            parse_number(target)
        except ValueError:
            raise UserError(f"{where}: answer {target[:60]!r} is not a number (verifier numeric)") from None
    elif spec.verifier == "regex":
        try:
            re.compile(target)
        except re.error as exc:
            raise UserError(f"{where}: answer {target[:60]!r} is not a valid regular expression: {exc}") from None
    elif spec.verifier == "choice" and spec.choices is None and not re.fullmatch(r"[A-Za-z]", target):
        raise UserError(f"{where}: answer {target[:60]!r} is not a choice letter (verifier choice)")


def prompt_hash(question: str) -> float:
    """A number in [0, 1) fixed by the prompt text alone (the train/eval split of a row)."""
    return int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") / 2**64


@dataclass(frozen=True)
class DatasetRows:
    """The rows of each split and the difficulty bounds of the buckets (shared by the two splits)."""

    splits: dict[str, list[Row]]
    bounds: tuple[float, ...]
    """Upper bound (inclusive) of each bucket's difficulty; one bucket without a difficulty column."""

    def bucket_of(self, row: Row) -> int:
        if row.difficulty is None:
            return 0
        return next(i for i, upper in enumerate(self.bounds) if row.difficulty <= upper)


def bucket_bounds(values: list[float], buckets: int) -> tuple[float, ...]:
    """One bucket per distinct value when there are at most ``buckets``, else equal-count quantile buckets."""
    distinct = sorted(set(values))
    if len(distinct) <= buckets:
        return tuple(distinct)
    ordered = sorted(values)
    bounds = {ordered[min(len(ordered) - 1, math.ceil(len(ordered) * (k + 1) / buckets) - 1)] for k in range(buckets)}
    return tuple(sorted(bounds))


def split_rows(spec: DatasetSpec) -> DatasetRows:
    """Load the rows and split them into train and eval (separate files/splits, else by prompt hash)."""
    train = load_rows(spec.path, spec, spec.split)
    if spec.eval_path is not None or spec.eval_split is not None:
        eval_rows = load_rows(spec.eval_path or spec.path, spec, spec.eval_split or spec.split)
    else:
        held = [prompt_hash(r.split_key) < spec.eval_fraction for r in train]
        eval_rows = [r for r, h in zip(train, held) if h]
        train = [r for r, h in zip(train, held) if not h]
        if not eval_rows:
            raise UserError(
                f"dataset {spec.path}: eval_fraction {spec.eval_fraction} of {len(train)} rows leaves no eval rows; "
                "raise eval_fraction or give eval_path"
            )
    if not train:
        raise UserError(f"dataset {spec.path}: no training rows are left after holding out eval rows")
    values = [r.difficulty for r in train + eval_rows if r.difficulty is not None]
    bounds = bucket_bounds(values, spec.difficulty_buckets) if spec.difficulty_column else (math.inf,)
    return DatasetRows({"train": train, "eval": eval_rows}, bounds)


_ROWS: dict[str, DatasetRows] = {}


def dataset_rows(spec: DatasetSpec) -> DatasetRows:
    """The loaded rows of ``spec``, loaded once per process."""
    key = spec.key()
    if key not in _ROWS:
        _ROWS[key] = split_rows(spec)
    return _ROWS[key]
