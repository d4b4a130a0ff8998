"""Verifiers for dataset tasks, and the user callables that reward terms and dataset verifiers share.

A dataset verifier compares the answer extracted from a response with the row's processed answer (the
target)::

    exact       the two strings are equal
    normalized  equal after Unicode NFKC, case folding, collapsing whitespace, and stripping surrounding
                quotes, ``$`` and trailing punctuation
    numeric     both parse as numbers (``1,234``, ``-3.5``, ``3/4``, ``50%``) within ``rel_tol``/``abs_tol``
    choice      multiple choice: the response names the target letter (``B``, ``(B)``, ``B.``, ``B) text``)
    regex       the answer fully matches the row's pattern (the answer column holds a regular expression)
    math        mathematical equivalence by Hugging Face's math-verify (LaTeX, fractions, sets, intervals)

``math`` parses with sympy and ``regex`` may backtrack exponentially on a crafted answer, so a task using
either is not pure (``Task.pure = False``): it is verified in the isolated worker pool. A verifier may also be
``"module:function"``: a user callable (see :class:`UserCallable`).
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
import signal
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from polyrl.errors import UserError
from polyrl.registry import Registry

CheckResult = float | tuple[float, str]


@dataclass(frozen=True)
class DatasetVerifier:
    """A registered dataset verifier: ``check(answer, target, **options)`` and whether it is pure."""

    check: Callable[..., CheckResult]
    pure: bool = True
    """False when it evaluates expressions (run it in an isolated worker)."""

    def bind(self, name: str, options: dict[str, Any]) -> Callable[[str, str], CheckResult]:
        """``check`` with ``options`` fixed; an unknown option is a UserError (at start-up)."""
        try:
            inspect.signature(self.check).bind("answer", "target", **options)
        except TypeError:
            known = [p for p in inspect.signature(self.check).parameters if p not in ("answer", "target")]
            raise UserError(
                f"verifier {name!r} does not take option(s) {', '.join(sorted(options))}; "
                f"known: {', '.join(known) or 'none'}"
            ) from None
        return lambda answer, target: self.check(answer, target, **options)


def _verifier_entry(name: str, check: Any, **metadata: Any) -> DatasetVerifier:
    if not callable(check):
        raise TypeError(f"dataset verifier {name!r} must be a function, got {check!r}")
    return DatasetVerifier(check, **metadata)


DATASET_VERIFIERS: Registry[DatasetVerifier] = Registry(
    "dataset verifier", "polyrl.verifiers", builtins=("polyrl.tasks.verifiers",), entry=_verifier_entry
)
"""``verifier:`` names of dataset tasks: the built-ins below and the plugins of the ``polyrl.verifiers`` group."""


def register_verifier(name: str, *, pure: bool = True) -> Callable[[Callable], Callable]:
    """Decorator: ``check(answer, target, **options) -> score | (score, reason)`` becomes verifier ``name``;
    ``pure=False`` when it evaluates anything (it then runs in an isolated worker)."""
    return DATASET_VERIFIERS.register(name, pure=pure)


_STRIP = " \t\n\"'`$.,;:!?"


def normalize_text(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed, surrounding quotes/``$``/punctuation stripped."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(text.split()).strip(_STRIP)


@register_verifier("exact")
def exact(answer: str, target: str) -> float:
    return float(answer == str(target))


@register_verifier("normalized")
def normalized(answer: str, target: str) -> float:
    return float(normalize_text(answer) == normalize_text(str(target)))


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,4})?$")
_FRACTION = re.compile(r"^[+-]?\d{1,40}\s*/\s*\d{1,40}$")


def parse_number(text: str) -> float:
    """A number written as ``1,234``, ``-3.5``, ``1e3``, ``3/4``, ``$12`` or ``50%`` (= 50); ValueError otherwise."""
    s = str(text).strip().strip("$").replace(",", "").removesuffix("%").strip().rstrip(".")
    if _FRACTION.match(s):
        return float(Fraction(s.replace(" ", "")))
    if not _NUMBER.match(s):
        raise ValueError(f"not a number: {text[:40]!r}")
    value = float(s)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text[:40]!r}")
    return value


@register_verifier("numeric")
def numeric(answer: str, target: str, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> CheckResult:
    """Equal within ``rel_tol`` (relative) or ``abs_tol`` (absolute), as :func:`math.isclose`."""
    try:
        value = parse_number(answer)
    except ValueError:
        return 0.0, "malformed"
    return float(math.isclose(value, parse_number(target), rel_tol=rel_tol, abs_tol=abs_tol))


_CHOICE = re.compile(r"^\(?([A-Za-z])(?:[).:]\s*.*|\s+.*)?$", re.DOTALL)


def choice_letter(text: str) -> str | None:
    """The option letter a response names: ``B``, ``(B)``, ``b.``, ``B) Paris``, ``B: Paris``."""
    match = _CHOICE.match(str(text).strip())
    return match.group(1).upper() if match else None


@register_verifier("choice")
def choice(answer: str, target: str) -> CheckResult:
    letter = choice_letter(answer)
    if letter is None:
        return 0.0, "malformed"
    return float(letter == str(target).upper())


@register_verifier("regex", pure=False)
def regex(answer: str, target: str) -> float:
    """The answer fully matches the pattern in the answer column (patterns are compiled when rows load).

    Not pure: a pattern with nested repetition backtracks exponentially on a crafted answer, so matching runs
    under the isolated worker's time limit."""
    return float(re.fullmatch(str(target), answer) is not None)


def _math_timeout() -> int | None:
    """math-verify's own 5 s limit, where it may use SIGALRM: only a main thread may set it, and when the
    alarm is already someone's (the isolated verifier worker's per-call limit) math-verify must not cancel it."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return 5 if signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None) else None


def _math_parse(text: str, timeout: int | None):
    from math_verify import parse

    # a bare expression reads best as inline LaTeX ("\{1, 2\}" is a set, "(0, 1]" an interval)
    if "$" not in text and "\\boxed" not in text:
        parsed = parse(f"${text}$", parsing_timeout=timeout)
        if parsed:
            return parsed
    return parse(text, parsing_timeout=timeout)


@register_verifier("math", pure=False)
def math_equivalent(answer: str, target: str, float_rounding: int = 6) -> CheckResult:
    """Equivalence by math-verify (``verify(gold, prediction)``); unparseable answers are ``malformed``, and a
    row whose answer math-verify cannot parse gives every response the reason ``target_unparseable`` (targets
    are not parsed when rows load: at ~10-20 ms a row that would hold up a large dataset's start-up)."""
    from math_verify import verify

    timeout = _math_timeout()
    gold = _math_parse(str(target), timeout)
    if not gold:  # the dataset's answer, not the response, is at fault: say so rather than score a silent 0
        return 0.0, "target_unparseable"
    predicted = _math_parse(answer, timeout)
    if not predicted:
        return 0.0, "malformed"
    return float(verify(gold, predicted, float_rounding=float_rounding, timeout_seconds=timeout))


# -- user callables ------------------------------------------------------------------------------------
#: Argument names a user callable may ask for, per completion and per group.
COMPLETION_ARGS = ("problem", "response", "extracted", "target", "verdict")
GROUP_ARGS = ("problems", "responses", "verdicts")


@dataclass(frozen=True)
class UserCallable:
    """A user function called with the arguments it names.

    Per completion it may take any of ``problem`` (the :class:`~polyrl.tasks.base.Problem`), ``response``
    (the full response text), ``extracted`` (the answer the answer format found, or None), ``target``
    (``problem.answer``) and ``verdict`` (the task's :class:`~polyrl.tasks.base.Verdict`; not for verifiers)
    and returns a number (a bool counts as 0/1; a verifier may return ``(score, reason)``). A group-level
    function takes ``problems``, ``responses`` and/or ``verdicts`` (lists over one group) and returns one
    number per completion.
    """

    fn: Callable[..., Any]
    path: str
    args: tuple[str, ...]
    """The arguments it is called with: those it names, or with ``**kwargs`` every one polyrl provides."""
    group: bool
    style: str = "polyrl"
    """``polyrl`` (the arguments above) or ``trl`` (TRL's ``f(completions, prompts=None, **kwargs)``, batched)."""

    def __call__(self, **available: Any) -> Any:
        return self.fn(**{name: available[name] for name in self.args if name in available})


def import_callable(path: str) -> UserCallable:
    """The function at ``"package.module:function"``; any problem is a one-line UserError naming ``path``."""
    module_name, sep, attr = str(path).partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"callable {path!r} must be written 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own error on import
        raise UserError(f"callable {path!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise UserError(f"callable {path!r}: module {module_name!r} has no attribute {attr!r}")
    return user_callable(fn, path)


def user_callable(fn: Callable[..., Any], label: str | None = None) -> UserCallable:
    """Wrap ``fn``, checking that it asks only for arguments polyrl provides (per completion or per group).
    A ``**kwargs`` parameter receives every argument of its kind; a function whose first parameter is
    ``completions`` has TRL's signature (``f(completions, prompts=None, **kwargs) -> list[float]``)."""
    label = label or getattr(fn, "__qualname__", repr(fn))
    if not callable(fn):
        raise UserError(f"callable {label!r} is not a function")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        raise UserError(f"callable {label!r}: its signature cannot be read") from None
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    names = tuple(n for n, p in params.items() if p.kind not in variadic)
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    required = [n for n, p in params.items() if p.default is inspect.Parameter.empty and p.kind not in variadic]
    if names[:1] == ("completions",):
        unknown = [n for n in required if n != "completions"]
        if unknown and not takes_kwargs:
            raise UserError(
                f"callable {label!r}: a TRL-style reward function takes completions, prompts and keyword columns "
                f"({', '.join(unknown)} would never be passed)"
            )
        return UserCallable(fn, label, names, group=False, style="trl")
    group = any(n in GROUP_ARGS for n in names)
    allowed = GROUP_ARGS if group else COMPLETION_ARGS
    unknown = [n for n in required if n not in allowed]
    if unknown or not (names or takes_kwargs):
        raise UserError(
            f"callable {label!r}: takes {', '.join(names) or 'no arguments'}; a reward or verifier function takes "
            f"some of {', '.join(COMPLETION_ARGS)} (per completion) or of {', '.join(GROUP_ARGS)} (per group), "
            "or TRL's completions, prompts=None, **kwargs"
        )
    args = allowed if takes_kwargs else tuple(n for n in names if n in allowed)
    return UserCallable(fn, label, args, group)
