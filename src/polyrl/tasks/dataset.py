"""Dataset tasks: rows of a local jsonl/json/parquet/csv file, or of anything ``datasets.load_dataset`` loads,
served through the same :class:`~polyrl.tasks.base.Task` protocol as generated tasks.

In a training config (the dataset fields may sit in the task entry, or under ``dataset:``)::

    tasks:
      - {dataset: data/gsm8k.jsonl, name: gsm8k, prompt: question, answer: answer,
         answer_after: "####", verifier: numeric, eval_fraction: 0.1}
      - countdown                                   # generated tasks mix in as usual

In Python: ``register_dataset_task("gsm8k", DatasetSpec(path="data/gsm8k.jsonl", answer_after="####"))``,
after which ``get_task("gsm8k")`` (and ``env/retry:gsm8k``) works like any registered task.

* **Rows and splits.** Without ``eval_path``/``eval_split``, a row belongs to the eval split when the hash of
  its prompt falls below ``eval_fraction``: deterministic, independent of row order and of the other rows
  (adding rows never moves one), and duplicate prompts always land in the same split.
* **Seeds.** ``generate(seed, difficulty, split)`` serves row ``perm[seed mod n]`` of a fixed shuffled
  order ``perm`` of the split's rows (of the knob's bucket), so seeds 0…n-1 visit every row once.
* **Difficulty.** With ``difficulty_column`` (numbers, or text holding one such as ``Level 3``; larger is
  harder), rows are grouped into at most ``difficulty_buckets`` buckets — one per distinct value when there
  are few, else equal-count quantile buckets — and the knob selects the bucket as every integer parameter
  does (``bucket = floor(knob * (B - 1))``: knob 0 the easiest, knob 1 the hardest). Without it, the knob
  is accepted and ignored.
* **Problems.** ``Problem.answer`` is the processed answer (after ``answer_after``/``answer_regex``),
  ``Problem.solution`` the same text (the reference response for SFT is it in the answer format), and
  ``Problem.params`` the row index (``row``) within its file, plus the ``bucket``.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from polyrl.errors import UserError
from polyrl.tasks.answers import MAX_ANSWER_CHARS
from polyrl.tasks.base import SPLITS, VERIFIER_ERROR, Difficulty, Param, Problem, Task, Verdict
from polyrl.tasks.verifiers import DATASET_VERIFIERS, UserCallable, import_callable

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
    difficulty_column: str | None = Field(None, description="Column of per-row difficulty (larger is harder).")
    difficulty_buckets: int = Field(5, ge=1, le=100, description="Most buckets the difficulty knob chooses from.")
    verifier: str = Field(
        "normalized",
        description="exact, normalized, numeric, choice, regex, math, or 'package.module:function'.",
    )
    verifier_options: dict[str, Any] = Field(
        default_factory=dict, description="Options of the verifier, e.g. {rel_tol: 0.01} for numeric."
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


def fold_dataset_fields(value: Any, task_fields: set[str]) -> Any:
    """A task entry with ``dataset: PATH`` and the dataset fields beside it → ``dataset: {path: PATH, …}``.

    ``task_fields`` are the task entry's own keys (name, difficulty, …), which stay where they are."""
    if not isinstance(value, dict) or "dataset" not in value:
        return value
    value = dict(value)
    dataset = value.pop("dataset")
    dataset = {"path": dataset} if isinstance(dataset, str) else dict(dataset or {})
    for key in list(value):
        if key not in task_fields:
            dataset[key] = value.pop(key)
    return {**value, "dataset": dataset}


# -- loading ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    index: int
    """Row number in its file (0-based)."""
    question: str
    target: str
    difficulty: float | None


def _load_table(path: str, spec: DatasetSpec, split: str):
    """The rows of ``path`` as a ``datasets.Dataset``; any failure is a one-line UserError naming ``path``."""
    import datasets

    datasets.disable_progress_bars()
    local = Path(path)
    suffix = local.suffix.lower()
    try:
        if suffix in LOCAL_FORMATS:
            if not local.is_file():
                raise UserError(f"dataset file {path} does not exist")
            if local.stat().st_size == 0:
                raise UserError(f"dataset file {path} is empty")
            return datasets.load_dataset(LOCAL_FORMATS[suffix], data_files=str(local), split="train")
        if local.is_dir() and (local / "dataset_info.json").exists():
            return datasets.load_from_disk(str(local))
        return datasets.load_dataset(path, spec.subset, split=split)
    except UserError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot load dataset {path}: {first[:300]}") from None


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (str, int, float, bool)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=str)


_NUMBER_IN_TEXT = re.compile(r"[-+]?\d+(?:\.\d+)?")


def _difficulty_value(value: Any, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
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
    """Every row of ``path`` processed: question (with lettered choices), target answer, difficulty."""
    table = _load_table(path, spec, split)
    if len(table) == 0:
        raise UserError(f"dataset {path} has no rows")
    wanted = [spec.prompt, spec.answer, spec.choices, spec.difficulty_column]
    missing = [c for c in wanted if c is not None and c not in table.column_names]
    if missing:
        raise UserError(f"dataset {path} has no column {missing[0]!r}; its columns: {', '.join(table.column_names)}")
    rows = []
    for i, record in enumerate(table):
        where = f"{path} row {i}"
        options = _options(record[spec.choices], where) if spec.choices else None
        target = _target(record[spec.answer], spec, options, where)
        _check_target(target, spec, where)
        difficulty = None
        if spec.difficulty_column is not None:
            difficulty = _difficulty_value(record[spec.difficulty_column], where)
        rows.append(Row(i, _question(record[spec.prompt], options, where), target, difficulty))
    return rows


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
        held = [prompt_hash(r.question) < spec.eval_fraction for r in train]
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


# -- the task -----------------------------------------------------------------------------------------
class DatasetTask(Task):
    """A dataset behind the Task protocol. Made per dataset by :func:`register_dataset_task`."""

    spec: ClassVar[DatasetSpec]
    category = "dataset"

    @cached_property
    def rows(self) -> DatasetRows:
        return dataset_rows(self.spec)

    @cached_property
    def _verifier(self):
        """``check(answer, target)`` of a registered verifier, or the user's :class:`UserCallable`."""
        return verifier_for(self.spec)

    @cached_property
    def _orders(self) -> dict[tuple[str, int], list[Row]]:
        return {}

    def _order(self, split: str, bucket: int) -> list[Row]:
        """The split's rows of ``bucket`` in a fixed shuffled order (seed ``seed`` serves ``order[seed % n]``)."""
        key = (split, bucket)
        if key not in self._orders:
            rows = [r for r in self.rows.splits[split] if self.rows.bucket_of(r) == bucket]
            random.Random(f"{self.name}|{split}|{bucket}").shuffle(rows)
            self._orders[key] = rows
        return self._orders[key]

    def _nearest_bucket(self, split: str, bucket: int) -> int:
        """``bucket``, or the nearest one that has rows in ``split`` (an eval split may miss a bucket)."""
        for b in sorted(range(len(self.rows.bounds)), key=lambda b: (abs(b - bucket), b)):
            if self._order(split, b):
                return b
        raise UserError(f"task {self.name}: the {split} split has no rows")

    def generate(self, seed: int, difficulty: Difficulty = "medium", split: str = "train") -> Problem:
        if split not in SPLITS:
            raise UserError(f"unknown split {split!r}: use train or eval")
        space = self.difficulty_space()
        params = space.resolve(difficulty)
        bucket = self._nearest_bucket(split, int(params.get("bucket", 0)))
        order = self._order(split, bucket)
        if split == "eval" and int(seed) >= len(order):
            _warn_repeats(self.name, len(order))
        row = order[int(seed) % len(order)]
        prompt = f"{row.question}\n{self.answer_format.instruction()}"
        served = {"bucket": bucket, "row": row.index} if self.params else {"row": row.index}
        return Problem(
            self.name, row.question, prompt, row.target, row.target, int(seed), split, space.knob(difficulty), served
        )

    def check(self, answer: str, problem: Problem) -> float | tuple[float, str]:
        return self._verifier(answer, str(problem.answer))

    def verify_in_process(self, problem: Problem, response: str) -> Verdict:
        if not isinstance(self._verifier, UserCallable):
            return super().verify_in_process(problem, response)
        return _verify_with_callable(self._verifier, self.answer_format.extract(response), problem, response)

    def __reduce__(self):
        # made by register_dataset_task, so not importable by name: an isolated verifier worker rebuilds the
        # class from the spec (checking needs the verifier only, so the rows are not loaded there)
        return _dataset_task_in_worker, (self.name, self.spec.model_dump(), self.params, self.answer_format)


_WARNED: set[str] = set()


def _warn_repeats(task: str, rows: int) -> None:
    """Held-out metrics over more problems than there are eval rows count some rows twice: say so, once."""
    if task not in _WARNED:
        _WARNED.add(task)
        print(
            f"polyrl: warning: task {task} has {rows} eval rows (at this difficulty); eval seeds from {rows} on "
            "repeat rows, so held-out metrics count some rows more than once",
            file=sys.stderr,
        )


def _verify_with_callable(fn: UserCallable, ext, problem: Problem, response: str) -> Verdict:
    """A user verifier's Verdict. A raising or non-finite verifier is ``verifier_error``, never a crash."""
    if ext.answer is None:
        return Verdict(0.0, False, ext.reason, False, None)
    if len(ext.answer) > MAX_ANSWER_CHARS:
        return Verdict(0.0, False, "malformed", ext.format_ok, None)
    try:
        result = fn(problem=problem, response=response, extracted=ext.answer, target=problem.answer)
        score, reason = result if isinstance(result, tuple) else (result, None)
        score = float(score)
    except Exception:
        return Verdict(0.0, False, VERIFIER_ERROR, ext.format_ok, ext.answer)
    if not math.isfinite(score):
        return Verdict(0.0, False, VERIFIER_ERROR, ext.format_ok, ext.answer)
    score = min(max(score, 0.0), 1.0)
    reason = reason or ("correct" if score >= 1.0 else ("partial" if score > 0 else "wrong"))
    return Verdict(score, score >= 1.0, str(reason), ext.format_ok, ext.answer)


def verifier_for(spec: DatasetSpec):
    """The spec's verifier: a registered one with its options bound, or an imported user callable."""
    if ":" in spec.verifier:
        fn = import_callable(spec.verifier)
        if fn.group or "verdict" in fn.args:
            raise UserError(
                f"verifier {spec.verifier!r} must score one response: it may take problem, response, extracted, "
                f"target (not {', '.join(a for a in fn.args if a in ('verdict', 'problems', 'responses', 'verdicts'))})"
            )
        if spec.verifier_options:
            raise UserError(f"verifier_options apply to built-in verifiers, not to {spec.verifier!r}")
        return fn
    return DATASET_VERIFIERS.lookup(spec.verifier).bind(spec.verifier, spec.verifier_options)


def verifier_is_pure(spec: DatasetSpec) -> bool:
    """Only the built-in string and number verifiers are pure; math (sympy) and user code are not."""
    return ":" not in spec.verifier and DATASET_VERIFIERS.lookup(spec.verifier).pure


_CLASSES: dict[str, type[DatasetTask]] = {}


def register_dataset_task(name: str, spec: DatasetSpec | dict[str, Any]) -> type[DatasetTask]:
    """Load and check the dataset now, and make it available as ``get_task(name)`` for this process.

    Registering the same name again with the same spec returns the same class; with another spec it
    replaces the earlier dataset task (never a built-in or plugin task of that name)."""
    from polyrl.tasks.registry import builtin_and_plugin_tasks, register_task

    if not isinstance(spec, DatasetSpec):
        spec = DatasetSpec.model_validate(spec)
    if name in _CLASSES and _CLASSES[name].spec == spec:
        return _CLASSES[name]
    existing = builtin_and_plugin_tasks().get(name)
    if existing is not None and not issubclass(existing, DatasetTask):
        raise UserError(f"dataset task name {name!r} is already the name of a registered task; choose another")
    if name.startswith("env/") or ":" in name:
        raise UserError(f"dataset task name {name!r} must not start with env/ or contain ':'")
    verifier_for(spec)  # unknown verifier, bad options, unimportable callable: fail before loading rows
    rows = dataset_rows(spec)
    buckets = len(rows.bounds)
    params = (Param("bucket", 0, buckets - 1, "difficulty bucket (0 = easiest rows)"),) if buckets > 1 else ()
    counts = f"{len(rows.splits['train'])} train / {len(rows.splits['eval'])} eval rows"
    cls = _dataset_task_class(name, spec, params, f"rows of {spec.path} ({counts}), verifier {spec.verifier}")
    _CLASSES[name] = register_task(cls)
    return cls


def _dataset_task_class(name: str, spec: DatasetSpec, params: tuple[Param, ...], description: str):
    attrs = {"name": name, "spec": spec, "params": params, "pure": verifier_is_pure(spec), "description": description}
    return type("DatasetTask_" + re.sub(r"\W", "_", name), (DatasetTask,), {**attrs, "__module__": __name__})


def _dataset_task_in_worker(name: str, spec: dict[str, Any], params: tuple[Param, ...], answer_format) -> DatasetTask:
    """The task of a pickled DatasetTask, rebuilt (not registered) where it is unpickled."""
    return _dataset_task_class(name, DatasetSpec.model_validate(spec), params, "")(answer_format)


def dataset_task(name: str, spec: DatasetSpec | dict[str, Any], **kwargs: Any) -> DatasetTask:
    """An instance of the dataset task ``name`` (registered as a side effect)."""
    return register_dataset_task(name, spec)(**kwargs)


def dataset_task_name(entry_name: str) -> str:
    """The dataset task's own name in a mix entry: ``gsm8k``, also for ``env/retry:gsm8k``."""
    return entry_name.partition(":")[2] if entry_name.startswith("env/") else entry_name


def resolve_task_spec(spec, env_config=None, answer_format=None) -> Task:
    """The task of one training-mix entry (a ``TaskSpec``): its dataset, if it has one, is registered under the
    entry's name first; then the name resolves as any task name does (``env/...`` wrappers included)."""
    from polyrl.envs.registry import resolve_task

    if getattr(spec, "dataset", None) is not None:
        register_dataset_task(dataset_task_name(spec.name), spec.dataset)
    return resolve_task(spec.name, env_config, answer_format)


TASK_ENTRY_FIELDS = {"name", "difficulty", "eval_difficulty"}
"""Keys of a training-mix entry that are not dataset fields (see ``TaskSpec``)."""


def register_config_datasets(path: str | Path) -> list[str]:
    """Register the dataset tasks in a training config's ``tasks:`` (for CLI commands given ``--config``)."""
    import yaml
    from pydantic import ValidationError

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read config {str(path)!r}: {type(exc).__name__}") from None
    entries = data.get("tasks", []) if isinstance(data, dict) else []
    names = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        entry = fold_dataset_fields(entry, TASK_ENTRY_FIELDS)
        if not isinstance(entry, dict) or "dataset" not in entry:
            continue
        try:
            spec = DatasetSpec.model_validate(entry["dataset"])
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise UserError(f"config {str(path)!r}: tasks.{i}.{where}: {err['msg']}") from None
        names.append(dataset_task_name(str(entry.get("name", ""))))
        register_dataset_task(names[-1], spec)
    return names
