"""``rg/<name>``: every reasoning-gym dataset as a polyrl :class:`~polyrl.tasks.base.Task`.

One Task subclass is made per dataset on first use. Generation builds the dataset with a one-item config
whose seed comes from the polyrl seed and split, so train and eval never share a reasoning-gym seed.
Difficulty maps the knob in [0, 1] onto the dataset's curriculum levels (where it has a curriculum).
Verification runs polyrl's shared answer extraction, then the dataset's own ``score_answer``, always in
the isolated verifier pool (``pure = False``): several scorers ``eval`` or ``sympy.parse_expr`` the answer.
Guards in ``polyrl.tasks.rg_guards`` run first where a scorer can be fooled or made to run code.

reasoning-gym is imported only here and only when an ``rg/`` task is asked for: it takes over a second
to import, and ``polyrl tasks list`` should not pay that.
"""

from __future__ import annotations

import difflib
import json
import math
from typing import Any, ClassVar

from polyrl.errors import UserError
from polyrl.tasks.answers import DEFAULT_ANSWER_STYLE
from polyrl.tasks.base import DEFAULT_DIFFICULTY, SPLITS, Difficulty, Param, Problem, Task
from polyrl.tasks.prefixes import RG_PREFIX, TaskRequest, register_task_prefix, with_answer_format
from polyrl.tasks.rg_guards import guard_answer, replace_eval

INSTALL_HINT = "reasoning-gym is not installed; install it with `pip install polyrl[rg]`"

#: Datasets not offered: ``composite`` mixes other datasets, which is the task sampler's job in polyrl.
EXCLUDED = frozenset({"composite"})

#: reasoning-gym seeds are used as ``Random(seed + index)`` and by some datasets as numpy seeds (< 2**32);
#: ``2 * (seed mod 2**31) + split`` keeps train and eval seeds disjoint and inside that range.
MAX_SEED = 2**31 - 1


def rg_seed(seed: int, split: str) -> int:
    """The reasoning-gym seed of polyrl ``seed`` in ``split``: any integer (the trainer draws seeds below 2**62)
    is folded into the adapter's range, deterministically; train and eval seeds never coincide."""
    return 2 * (int(seed) % (MAX_SEED + 1)) + SPLITS.index(split)


_CLASSES: dict[str, type[ReasoningGymTask]] = {}


def _rg():
    try:
        import reasoning_gym.factory as factory
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return factory


def _json_safe(value: Any) -> Any:
    """The item as plain JSON values, so a problem exported to a file scores the same after loading."""
    return json.loads(json.dumps(value, default=repr))


class ReasoningGymTask(Task):
    """A reasoning-gym dataset behind the polyrl Task protocol. Made per dataset by :func:`rg_task_class`."""

    rg_dataset: ClassVar[str]
    rg_group: ClassVar[str]
    has_curriculum: ClassVar[bool]
    partial_credit = True  # many score_answer functions give partial credit
    pure = False  # several score_answer functions eval or sympy-parse the answer: always verified isolated

    def __init__(self, answer_format=DEFAULT_ANSWER_STYLE):
        super().__init__(answer_format)
        factory = _rg()
        self._dataset_cls, self._config_cls = factory.DATASETS[self.rg_dataset]
        self._curriculum = factory.create_curriculum(self.rg_dataset) if self.has_curriculum else None
        # score_answer reads its arguments and, for a few datasets (decimal_arithmetic, time_intervals,
        # puzzle24, polynomial_equations), the config; one scorer per curriculum level serves every seed.
        self._scorers: dict[int | None, Any] = {}

    def _config(self, rg_seed: int, level: int):
        """The dataset config for ``level``, and the curriculum level it really uses (None: default config)."""
        defaults = {"seed": rg_seed, "size": 1}
        if self._curriculum is None:
            return self._config_cls(**defaults), None
        from reasoning_gym.coaching.base_curriculum import DefaultCurriculumContext, RangeAttributeMode

        # INCLUSIVE (reasoning-gym's default) widens each range up to the level's bound. UPPER_BOUND would
        # target the level more sharply but produces configs more datasets reject.
        context = DefaultCurriculumContext(mode=RangeAttributeMode.INCLUSIVE)
        # A few curricula produce configs their own validate() rejects at some levels (caesar_cipher and
        # survo above level 1, rubiks_cube at 4, knight_swap at all): use the nearest level below that
        # validates, else the default config.
        for candidate in range(level, -1, -1):
            self._curriculum.set_global_level(candidate)
            config = self._curriculum.generate_configuration(defaults, context)
            try:
                if hasattr(config, "validate"):
                    config.validate()
            except (AssertionError, ValueError):
                continue
            return config, candidate
        return self._config_cls(**defaults), None

    def generate(self, seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, split: str = "train") -> Problem:
        if split not in SPLITS:
            raise UserError(f"unknown split {split!r}: use train or eval")
        seed = int(seed)
        space = self.difficulty_space()
        params = space.resolve(difficulty)
        config, level_used = self._config(rg_seed(seed, split), params.get("level", 0))
        item = self._dataset_cls(config=config)[0]
        entry = _json_safe({"question": item["question"], "answer": item["answer"], "metadata": item["metadata"]})
        entry["rg_level"] = level_used  # differs from params["level"] where the curriculum fell back
        problem = Problem(
            self.name,
            entry["question"],
            f"{entry['question']}\n{self.answer_format.instruction()}",
            entry,
            None,
            seed,
            split,
            space.knob(difficulty),
            dict(params),
        )
        reference = entry["answer"]
        # Some datasets' reference answers do not score 1.0 with their own score_answer (or do not
        # survive the answer format). Such items keep solution=None so nobody trains on a wrong target.
        if isinstance(reference, str) and reference.strip():
            problem.solution = reference
            # the reference is the dataset's own, so its check needs no isolation
            if self.verify_in_process(problem, self.answer_format.wrap(reference)).score < 1.0:
                problem.solution = None
        return problem

    def _scorer(self, level: int | None):
        if level not in self._scorers:
            config = self._config(0, level)[0] if level is not None else self._config_cls(seed=0, size=1)
            self._scorers[level] = self._dataset_cls(config=config)
            replace_eval(self.rg_dataset, self._dataset_cls)
        return self._scorers[level]

    def __reduce__(self):
        # made by rg_task_class, so not importable by its name: a verifier worker rebuilds it from the dataset
        return rg_task, (self.rg_dataset, self.answer_format.style)

    def check(self, answer: str, problem: Problem) -> float | tuple[float, str]:
        entry = problem.answer
        guarded = guard_answer(self.rg_dataset, answer, entry)
        if guarded is not None:
            return guarded
        level = entry.get("rg_level") if isinstance(entry, dict) else None
        scorer = self._scorer(level if isinstance(level, int) else None)
        score = scorer.score_answer(answer, entry)
        return float(score) if score is not None and math.isfinite(float(score)) else 0.0


def _describe(dataset_cls, name: str, curriculum: bool) -> str:
    doc = (dataset_cls.__doc__ or "").strip().splitlines()
    first = doc[0].strip() if doc else f"reasoning-gym dataset {name}"
    if not curriculum:
        first += " (no curriculum: every difficulty uses the default config)"
    return first


def rg_task_class(name: str) -> type[ReasoningGymTask]:
    """The Task class for reasoning-gym dataset ``name`` (made once, then cached)."""
    if name in _CLASSES:
        return _CLASSES[name]
    factory = _rg()
    if name not in factory.DATASETS or name in EXCLUDED:
        known = [n for n in factory.DATASETS if n not in EXCLUDED]
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"; did you mean {', '.join('rg/' + c for c in close)}?" if close else "; see `polyrl tasks list --rg`"
        why = " (it mixes other datasets; use a task sampler)" if name in EXCLUDED else ""
        raise UserError(f"unknown reasoning-gym dataset {name!r}{why}{hint}")
    dataset_cls, _ = factory.DATASETS[name]
    curriculum = factory.has_curriculum(name)
    params: tuple[Param, ...] = ()
    if curriculum:
        attrs = factory.create_curriculum(name).attributes.values()
        top = max((len(a.levels) - 1 for a in attrs), default=0)
        if top > 0:
            params = (Param("level", 0, top, "reasoning-gym curriculum level (each attribute capped at its top)"),)
    group = dataset_cls.__module__.split(".")[1] if dataset_cls.__module__.count(".") >= 2 else "other"
    cls = type(
        f"RG_{name}",
        (ReasoningGymTask,),
        {
            "name": f"rg/{name}",
            "category": f"rg/{group}",
            "description": _describe(dataset_cls, name, curriculum),
            "params": params,
            "rg_dataset": name,
            "rg_group": group,
            "has_curriculum": curriculum,
            "__module__": __name__,
        },
    )
    _CLASSES[name] = cls
    return cls


@register_task_prefix(RG_PREFIX)
def _rg_by_name(request: TaskRequest) -> ReasoningGymTask:
    """``rg/<dataset>``: the reasoning-gym dataset's task."""
    return with_answer_format(rg_task_class(request.name[len(RG_PREFIX) :])(), request)


def rg_task(name: str, answer_format: str) -> ReasoningGymTask:
    """The ``rg/<name>`` task (how a verifier worker rebuilds one it was sent)."""
    return rg_task_class(name)(answer_format)


def rg_task_classes() -> list[type[ReasoningGymTask]]:
    """A Task class for every reasoning-gym dataset, sorted by name."""
    factory = _rg()
    return [rg_task_class(n) for n in sorted(factory.DATASETS) if n not in EXCLUDED]
