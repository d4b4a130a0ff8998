"""The Task protocol: a generator with controllable difficulty and a rule-based verifier.

A task turns ``(seed, difficulty, split)`` into a :class:`Problem` deterministically, and scores any
response to that problem with :meth:`Task.verify`, which never raises.
"""

from __future__ import annotations

import copy
import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from polyrl.errors import UserError
from polyrl.tasks.answers import DEFAULT_ANSWER_STYLE, MAX_ANSWER_CHARS, AnswerFormat
from polyrl.tasks.images import png_base64, problem_images
from polyrl.tasks.verdict import VERIFIER_ERROR, Verdict

CATEGORIES = ("arithmetic", "logic", "grid", "graph", "sequential", "crypto", "search", "visual")
"""The task categories: Enigmata's seven, and ``visual`` (problems shown as images); plugins may add others."""

TEXT = "text"
IMAGE = "image"
TEXT_ONLY = frozenset({TEXT})
"""What a text task shows a policy, and what a language model takes."""
TEXT_AND_IMAGES = frozenset({TEXT, IMAGE})
"""What a task whose problems carry images shows, and what a vision-language model takes."""

SPLITS = ("train", "eval")
"""Seed spaces. The same seed index in different splits draws from unrelated random streams."""

DEFAULT_PRESETS: Mapping[str, float] = {"easy": 0.0, "medium": 0.5, "hard": 1.0}

Difficulty = float | str | Mapping[str, Any]
DEFAULT_DIFFICULTY = "easy"
"""The difficulty wherever none is given: ``generate()``, a training-mix entry (``tasks[].difficulty``) and the
CLI's ``--difficulty`` options."""
"""A knob in [0, 1], a preset name (``easy``/``medium``/``hard``), a numeric string, or explicit parameters."""


@dataclass(frozen=True)
class Param:
    """One difficulty parameter, interpolated monotonically from ``easy`` (knob 0) to ``hard`` (knob 1)."""

    name: str
    easy: float
    hard: float
    doc: str = ""
    integer: bool = True

    def at(self, knob: float) -> int | float:
        value = self.easy + knob * (self.hard - self.easy)
        if self.integer:
            # floor keeps the mapping monotone and reaches `hard` exactly at knob == 1
            lo, hi = sorted((self.easy, self.hard))
            value = math.floor(value + 1e-9) if self.hard >= self.easy else math.ceil(value - 1e-9)
            return int(min(max(value, lo), hi))
        return float(value)

    def check(self, value: Any) -> int | float:
        lo, hi = sorted((self.easy, self.hard))
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise UserError(f"difficulty parameter {self.name!r} must be a number, got {value!r}") from None
        if not (lo <= v <= hi):
            raise UserError(f"difficulty parameter {self.name!r}={value!r} is outside its range [{lo:g}, {hi:g}]")
        if self.integer:
            if v != int(v):
                raise UserError(f"difficulty parameter {self.name!r} must be an integer, got {value!r}")
            return int(v)
        return v


@dataclass(frozen=True)
class DifficultySpace:
    """Named parameters with ranges, presets, and one scalar knob in [0, 1] mapped onto all of them."""

    params: tuple[Param, ...]
    presets: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_PRESETS))

    def knob(self, difficulty: Difficulty) -> float | None:
        """The scalar knob for ``difficulty``, or None for explicit parameters."""
        if isinstance(difficulty, Mapping):
            return None
        if isinstance(difficulty, str):
            if difficulty in self.presets:
                return float(self.presets[difficulty])
            try:
                difficulty = float(difficulty)
            except ValueError:
                names = ", ".join(self.presets)
                raise UserError(
                    f"unknown difficulty {difficulty!r}: use a number in [0, 1] or one of {names}"
                ) from None
        if isinstance(difficulty, bool) or not isinstance(difficulty, (int, float)):
            raise UserError(f"difficulty must be a number in [0, 1] or a preset name, got {difficulty!r}")
        if not (0.0 <= float(difficulty) <= 1.0) or math.isnan(difficulty):
            raise UserError(f"difficulty {difficulty!r} is outside [0, 1]")
        return float(difficulty)

    def resolve(self, difficulty: Difficulty) -> dict[str, int | float]:
        """Parameter values for ``difficulty``; explicit parameters override the medium preset."""
        knob = self.knob(difficulty)
        if knob is not None:
            return {p.name: p.at(knob) for p in self.params}
        known = {p.name: p for p in self.params}
        unknown = sorted(set(difficulty) - set(known))
        if unknown:
            raise UserError(
                f"unknown difficulty parameter(s) {', '.join(unknown)}; known: {', '.join(known) or 'none'}"
            )
        values = {p.name: p.at(self.presets.get("medium", 0.5)) for p in self.params}
        values.update({k: known[k].check(v) for k, v in difficulty.items()})
        return values

    def describe(self) -> list[dict[str, Any]]:
        return [
            {
                "name": p.name,
                "easy": p.easy,
                "hard": p.hard,
                "doc": p.doc,
                **{k: p.at(v) for k, v in self.presets.items()},
            }
            for p in self.params
        ]


@dataclass
class Problem:
    """One generated problem: what the policy sees and what the verifier needs."""

    task: str
    question: str
    """The bare task statement."""
    prompt: str
    """The question followed by the answer-format instruction: what an LLM is shown."""
    answer: Any
    """What the verifier needs (JSON-serializable): the target, the puzzle, the graph…"""
    solution: str | None
    """A reference answer (unwrapped), or None where the task has none."""
    seed: int
    split: str
    difficulty: float | None
    """The knob the problem was generated at (None for explicit parameters)."""
    params: dict[str, Any]
    natural_question: str | None = None
    """The same problem as a natural-language statement for instruction-tuned LLMs: what the puzzle is, the data,
    the rules and exactly what the answer looks like (None where the task has only ``question``)."""
    natural_prompt: str | None = None
    """The natural statement followed by the answer-format instruction (``prompt.style: natural``)."""
    source: str = "generated"
    """Where the problem came from: ``generated`` by its task's generator, ``dataset`` (a row of a file),
    ``synthesized`` (near a problem the policy failed, :mod:`polyrl.curriculum.weakness`), ``replay`` (a failed
    problem drawn again), ``proposed`` (written by the policy in its proposer role, :mod:`polyrl.rollout.selfplay`);
    logged per step as ``source/<kind>``."""
    images: list[Any] = field(default_factory=list)
    """The images the problem shows beside its text, in order: RGB ``PIL.Image.Image``s (given as PIL images of any
    supported mode or uint8 numpy arrays, converted when the problem is made; :mod:`polyrl.tasks.images`)."""

    def __post_init__(self) -> None:
        if self.images is None:
            self.images = []
        elif not (isinstance(self.images, list) and not self.images):
            self.images = problem_images(self.images, f"problem of task {self.task}")

    @property
    def id(self) -> str:
        return f"{self.task}/{self.split}/{self.seed}/{_params_key(self.params)}"

    def to_dict(self) -> dict[str, Any]:
        """The problem as JSON-valued fields and its ``id``; ``images`` (base64 PNG text) only where it has images,
        so a text problem's record is what it always was."""
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "images"}
        if self.images:
            d["images"] = [png_base64(image) for image in self.images]
        d["id"] = self.id
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Problem:
        names = cls.__dataclass_fields__
        missing = [k for k in ("task", "question", "answer") if k not in d]
        if missing:
            raise UserError(f"problem record lacks field(s) {', '.join(missing)}")
        values = {k: d[k] for k in names if k in d}
        values.setdefault("prompt", d["question"])
        values.setdefault("solution", None)
        values.setdefault("seed", 0)
        values.setdefault("split", "train")
        values.setdefault("difficulty", None)
        values.setdefault("params", {})
        if values.get("images") is None:
            values["images"] = []
        return cls(**values)


@dataclass(frozen=True)
class Example:
    """What a task's generator returns; :meth:`Task.generate` adds the bookkeeping."""

    question: str
    """The terse shorthand the embedded tiny model learns (``prompt.style: terse``)."""
    answer: Any
    solution: str | None
    statement: str | None = None
    """The same problem in natural language, with the exact answer shape (``prompt.style: natural``)."""
    images: tuple[Any, ...] = ()
    """The images the problem shows (PIL images or uint8 arrays); only a task whose ``modalities`` include
    ``image`` may make them."""


def _params_key(params: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={params[k]}" for k in sorted(params))


def rng_for(task: str, split: str, seed: int, params: Mapping[str, Any]) -> random.Random:
    """The random stream for one problem. Train and eval streams never coincide."""
    digest = hashlib.sha256(f"{task}|{split}|{seed}|{_params_key(params)}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class Task:
    """Base class of every task. Subclasses set the class attributes and implement ``make`` and ``check``.

    ``make(rng, params) -> Example`` draws one problem (its terse question and, for LLMs, its natural statement);
    ``check(answer, problem) -> float | (float, reason)`` scores an extracted answer and may raise on malformed
    input (the exception becomes reason ``malformed``).
    """

    name: ClassVar[str]
    category: ClassVar[str]
    description: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    presets: ClassVar[Mapping[str, float]] = DEFAULT_PRESETS
    partial_credit: ClassVar[bool] = False
    """Whether ``check`` can return scores strictly between 0 and 1."""
    answer_shape: ClassVar[str] = ""
    """The words the natural statement uses for what the answer looks like (e.g. ``a single integer``)."""
    modalities: ClassVar[frozenset[str]] = TEXT_ONLY
    """What its problems show the policy: ``{"text"}``, or ``{"text", "image"}`` for a task whose problems carry
    images (a run refuses it for a policy that takes text only, :func:`check_modalities`)."""
    pure: ClassVar[bool] = False
    """Whether ``check`` is safe to run in the trainer's process: it never evaluates model text as code and
    its time and memory are bounded by the answer's length. Tasks that are not pure are verified in the
    isolated worker pool (:mod:`polyrl.tasks.isolation`); plugins opt in with ``pure = True``."""
    rollout_kind: ClassVar[str] = "single_turn"
    r"""The registered rollout kind that plays this task's problems (``polyrl.rollout.dispatch.ROLLOUT_KINDS``):
    ``single_turn``, G completions of each prompt; environments are ``episode``\ s, agent harnesses ``harness``."""

    def __init__(self, answer_format: AnswerFormat | str = DEFAULT_ANSWER_STYLE):
        self.answer_format = AnswerFormat(answer_format) if isinstance(answer_format, str) else answer_format

    @classmethod
    def difficulty_space(cls) -> DifficultySpace:
        return DifficultySpace(cls.params, cls.presets)

    # -- to implement -------------------------------------------------------------------------------
    def make(self, rng: random.Random, params: dict[str, Any]) -> Example:
        raise NotImplementedError

    def check(self, answer: str, problem: Problem) -> float | tuple[float, str]:
        raise NotImplementedError

    # -- the protocol -------------------------------------------------------------------------------
    def generate(self, seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, split: str = "train") -> Problem:
        """Deterministic: the same ``(seed, difficulty, split)`` always gives the same problem."""
        if split not in SPLITS:
            raise UserError(f"unknown split {split!r}: use train or eval")
        space = self.difficulty_space()
        params = space.resolve(difficulty)
        knob = space.knob(difficulty)
        ex = self.make(rng_for(self.name, split, int(seed), params), params)
        return self.problem_from(ex, int(seed), split, knob, params)

    def problem_from(
        self,
        ex: Example,
        seed: int,
        split: str,
        difficulty: float | None,
        params: Mapping[str, Any],
        source: str = "generated",
    ) -> Problem:
        """The :class:`Problem` of this task for an example made elsewhere (by :meth:`make`, or proposed by a
        policy in self-play), with this task's answer-format instruction."""
        if ex.images and IMAGE not in self.modalities:
            raise TypeError(
                f"task {self.name} made a problem with images but its modalities are {set(self.modalities)}"
            )
        instruction = self.answer_format.instruction()
        prompt = f"{ex.question}\n{instruction}"
        natural_prompt = None if ex.statement is None else f"{ex.statement}\n{instruction}"
        return Problem(
            self.name,
            ex.question,
            prompt,
            ex.answer,
            ex.solution,
            seed,
            split,
            difficulty,
            dict(params),
            natural_question=ex.statement,
            natural_prompt=natural_prompt,
            source=source,
            images=list(ex.images),
        )

    def reference_response(self, problem: Problem) -> str | None:
        """The reference solution written in this task's answer format (for SFT warm starts)."""
        return None if problem.solution is None else self.answer_format.wrap(problem.solution)

    def verify(self, problem: Problem, response: str) -> Verdict:
        """Score ``response``. Never raises: any input gets a Verdict with a reason.

        Pure tasks verify here; the others in the isolated worker pool, where a call that runs too long or
        crashes is the verdict ``verifier_timeout`` or ``verifier_error`` (score 0).
        """
        if self.pure:
            return self.verify_in_process(problem, response)
        from polyrl.tasks.isolation import verifier_pool

        return verifier_pool().verify([(self, problem, response)])[0]

    # an override of ``verify`` lacks this mark: :func:`polyrl.tasks.isolation.verify_many` then calls it
    verify.dispatches_to_pool = True  # type: ignore[attr-defined]

    def verify_many(self, problems: Sequence[Problem], responses: Sequence[str]) -> list[Verdict]:
        """One verdict per ``(problem, response)`` pair, in order; an impure task's batch is one pool round trip."""
        from polyrl.tasks.isolation import verify_many

        if len(problems) != len(responses):
            raise ValueError(f"{len(problems)} problems but {len(responses)} responses")
        return verify_many([(self, p, r) for p, r in zip(problems, responses)])

    def verify_in_process(self, problem: Problem, response: str) -> Verdict:
        """Extract the answer and run ``check`` in this process, whatever ``pure`` says (the worker pool's entry)."""
        ext = self.answer_format.extract(response)
        if ext.answer is None:
            return Verdict(0.0, False, ext.reason, False, None)
        if len(ext.answer) > MAX_ANSWER_CHARS:
            return Verdict(0.0, False, "malformed", ext.format_ok, None)
        try:
            result = self.check(ext.answer, problem)
        except MemoryError:  # the verifier's limit, not the answer's form
            return Verdict(0.0, False, VERIFIER_ERROR, ext.format_ok, ext.answer)
        except Exception:
            return Verdict(0.0, False, "malformed", ext.format_ok, ext.answer)
        score, reason = result if isinstance(result, tuple) else (result, None)
        score = float(score)
        if not math.isfinite(score):
            score = 0.0
        score = min(max(score, 0.0), 1.0)
        if reason is None:
            reason = "correct" if score >= 1.0 else ("partial" if score > 0 else "wrong")
        return Verdict(score, score >= 1.0, reason, ext.format_ok, ext.answer)

    def __repr__(self) -> str:
        return f"<Task {self.name} ({self.category})>"


def check_modalities(tasks: Mapping[str, Task], takes: frozenset[str], model: str) -> None:
    """Refuse, in one line, a task whose problems show what the policy ``model`` cannot take (images to a model of
    text only): trained anyway, it would see the question without the picture it is about."""
    for name, task in tasks.items():
        missing = sorted(set(task.modalities) - set(takes))
        if missing:
            shown = "images" if missing == [IMAGE] else " and ".join(missing)
            kinds = " and ".join(sorted(takes))
            raise UserError(f"task {name} has {shown}; model {model} takes {kinds} only")
