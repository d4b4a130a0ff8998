"""Dataset tasks: rows of a local jsonl/json/parquet/csv file, or of anything ``datasets.load_dataset`` loads,
served through the same :class:`~polyrl.tasks.base.Task` protocol as generated tasks.

In a training config (the dataset fields may sit in the task entry, or under ``dataset:``)::

    tasks:
      - {dataset: data/gsm8k.jsonl, name: gsm8k, prompt: question, answer: answer,
         answer_after: "####", verifier: numeric, eval_fraction: 0.1}
      - countdown                                   # generated tasks mix in as usual

In Python: ``load_dataset_task("gsm8k", DatasetSpec(path="data/gsm8k.jsonl", answer_after="####"))``,
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
* **Images.** With ``images: COLUMN`` each row's image(s) (paths relative to the file, bytes, ``Image`` features;
  :mod:`polyrl.tasks.dataset_images`) become ``Problem.images``, the task's modalities text and image, and a row's
  split hash covers its images' pixels as well as its prompt.
"""

from __future__ import annotations

import inspect
import math
import random
import re
import sys
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from polyrl.errors import UserError
from polyrl.tasks.answers import MAX_ANSWER_CHARS
from polyrl.tasks.base import (
    DEFAULT_DIFFICULTY,
    SPLITS,
    TEXT_AND_IMAGES,
    TEXT_ONLY,
    VERIFIER_ERROR,
    Difficulty,
    Param,
    Problem,
    Task,
    Verdict,
)
from polyrl.tasks.dataset_images import load_image
from polyrl.tasks.dataset_rows import DatasetRows, DatasetSpec, Row, bucket_bounds, dataset_rows, prompt_hash
from polyrl.tasks.verifiers import DATASET_VERIFIERS, UserCallable, import_callable

__all__ = [
    "DatasetSpec",
    "DatasetTask",
    "bucket_bounds",
    "dataset_task",
    "fold_dataset_fields",
    "load_config_datasets",
    "load_dataset_task",
    "prompt_hash",
]


def fold_dataset_fields(value: Any, task_fields: set[str]) -> Any:
    """A task entry with ``dataset: PATH`` and the dataset fields beside it → ``dataset: {path: PATH, …}``.

    ``task_fields`` are the task entry's own keys (name, difficulty, …), which stay where they are."""
    if not isinstance(value, dict) or value.get("dataset") is None:
        return value  # no dataset (``dataset: None`` is what a dumped config of a built-in task holds)
    value = dict(value)
    dataset = value.pop("dataset")
    dataset = {"path": dataset} if isinstance(dataset, str) else dict(dataset or {})
    for key in list(value):
        if key not in task_fields:
            dataset[key] = value.pop(key)
    return {**value, "dataset": dataset}


# -- the task -----------------------------------------------------------------------------------------
class DatasetTask(Task):
    """A dataset behind the Task protocol. Made per dataset by :func:`load_dataset_task`."""

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

    def generate(self, seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, split: str = "train") -> Problem:
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
        where = f"dataset task {self.name} row {row.index}"
        return Problem(
            self.name,
            row.question,
            prompt,
            row.target,
            row.target,
            int(seed),
            split,
            space.knob(difficulty),
            served,
            source="dataset",
            images=[load_image(ref, where, self.spec.max_image_pixels) for ref in row.images],
        )

    def check(self, answer: str, problem: Problem) -> float | tuple[float, str]:
        return self._verifier(answer, str(problem.answer))

    def verify_in_process(self, problem: Problem, response: str) -> Verdict:
        if not isinstance(self._verifier, UserCallable):
            return super().verify_in_process(problem, response)
        return _verify_with_callable(self._verifier, self.answer_format.extract(response), problem, response)

    def __reduce__(self):
        # made by load_dataset_task, so not importable by name: an isolated verifier worker rebuilds the
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
        named = inspect.signature(fn.fn).parameters
        wrong = [a for a in ("verdict", "problems", "responses", "verdicts", "completions") if a in named]
        if wrong:  # a **kwargs verifier gets problem, response, extracted and target
            raise UserError(
                f"verifier {spec.verifier!r} must score one response: it may take problem, response, extracted, "
                f"target (not {', '.join(wrong)})"
            )
        if spec.verifier_options:
            raise UserError(f"verifier_options apply to built-in verifiers, not to {spec.verifier!r}")
        return fn
    return DATASET_VERIFIERS.lookup(spec.verifier).bind(spec.verifier, spec.verifier_options)


def verifier_is_pure(spec: DatasetSpec) -> bool:
    """Only the built-in string and number verifiers are pure; math (sympy) and user code are not."""
    return ":" not in spec.verifier and DATASET_VERIFIERS.lookup(spec.verifier).pure


def load_dataset_task(name: str, spec: DatasetSpec | dict[str, Any]) -> type[DatasetTask]:
    """Load and check the dataset now, and register it as task ``name`` for this process.

    Loading the same name again with the same spec returns the same class; with another spec it replaces
    the earlier dataset task (never a built-in or plugin task of that name)."""
    from polyrl.tasks.prefixes import prefix_of
    from polyrl.tasks.task_registry import TASKS, register_task

    if not isinstance(spec, DatasetSpec):
        spec = DatasetSpec.model_validate(spec)
    existing = TASKS.get(name) if isinstance(name, str) else None
    if existing is not None and issubclass(existing, DatasetTask) and existing.spec == spec:
        return existing
    if existing is not None and not issubclass(existing, DatasetTask):
        raise UserError(f"dataset task name {name!r} is already the name of a registered task; choose another")
    prefix = prefix_of(name)
    if prefix is not None or ":" in name:
        raise UserError(
            f"dataset task name {name!r} must not start with {prefix or 'a task-name prefix'} or contain ':'"
        )
    verifier_for(spec)  # unknown verifier, bad options, unimportable callable: fail before loading rows
    rows = dataset_rows(spec)
    buckets = len(rows.bounds)
    params = (Param("bucket", 0, buckets - 1, "difficulty bucket (0 = easiest rows)"),) if buckets > 1 else ()
    counts = f"{len(rows.splits['train'])} train / {len(rows.splits['eval'])} eval rows"
    cls = _dataset_task_class(name, spec, params, f"rows of {spec.path} ({counts}), verifier {spec.verifier}")
    if existing is not None:
        TASKS.remove(name)  # another spec under the same name: this dataset replaces the earlier one
    return register_task(name)(cls)


def _dataset_task_class(name: str, spec: DatasetSpec, params: tuple[Param, ...], description: str):
    attrs = {"name": name, "spec": spec, "params": params, "pure": verifier_is_pure(spec), "description": description}
    attrs["modalities"] = TEXT_AND_IMAGES if spec.images is not None else TEXT_ONLY
    return type("DatasetTask_" + re.sub(r"\W", "_", name), (DatasetTask,), {**attrs, "__module__": __name__})


def _dataset_task_in_worker(name: str, spec: dict[str, Any], params: tuple[Param, ...], answer_format) -> DatasetTask:
    """The task of a pickled DatasetTask, rebuilt (not registered) where it is unpickled."""
    return _dataset_task_class(name, DatasetSpec.model_validate(spec), params, "")(answer_format)


def dataset_task(name: str, spec: DatasetSpec | dict[str, Any], **kwargs: Any) -> DatasetTask:
    """An instance of the dataset task ``name`` (registered as a side effect)."""
    return load_dataset_task(name, spec)(**kwargs)


def dataset_task_name(entry_name: str) -> str:
    """The dataset task's own name in a mix entry: ``gsm8k``, also for ``env/retry:gsm8k`` (the argument of a
    name with a task-name prefix)."""
    from polyrl.tasks.prefixes import prefix_of

    return entry_name.partition(":")[2] if ":" in entry_name and prefix_of(entry_name) else entry_name


TASK_ENTRY_FIELDS = {"name", "difficulty", "eval_difficulty", "harness"}
"""Keys of a training-mix entry that are not dataset fields (see ``TaskSpec``)."""


def load_config_datasets(path: str | Path) -> list[str]:
    """Load the dataset tasks in a training config's ``tasks:`` (for CLI commands given ``--config``)."""
    from pydantic import ValidationError

    from polyrl.yaml_files import read_yaml

    data = read_yaml(path, "config") or {}
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
        load_dataset_task(names[-1], spec)
    return names
