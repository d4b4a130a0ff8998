"""Checks polyrl runs before (or instead of) a reasoning-gym scorer that can be fooled or made to run code.

* ``puzzle24`` and ``countdown``: polyrl's exact evaluator (:func:`evaluate_expression`, never ``eval``)
  decides. Upstream ``puzzle24`` checks only that four numbers in range appear, so the constant ``4*3*2*1``
  scored 1 on every problem; upstream ``countdown`` allowed ``**`` and compared floats with a tolerance.
  Here the answer must use exactly the given numbers with ``+ - * /`` and reach the target exactly.
* Scorers that ``sympy.parse_expr`` the answer see only :func:`bounded_expression` text (no code, no power
  towers); anything else scores 0 with reason ``unsafe_expression``.
* Scorers that ``eval`` the answer to read a Python list get ``ast.literal_eval`` in its place.

Every rg scorer also runs in the isolated worker pool (time, memory and network limits).
"""

from __future__ import annotations

import sys
from typing import Any

from polyrl.tasks.builtin._parse import evaluate_expression
from polyrl.tasks.expressions import bounded_expression, literal

EVAL_SCORERS = frozenset({"string_insertion", "spiral_matrix", "n_queens", "binary_matrix"})
"""Datasets whose ``score_answer`` calls ``eval(answer)`` (to read a Python list)."""
EXPRESSION_SCORERS = frozenset({"polynomial_multiplication", "simple_integration", "intermediate_integration"})
"""Datasets whose ``score_answer`` calls ``sympy.parse_expr(answer)``."""
EXACT_TARGET = frozenset({"puzzle24", "countdown"})
"""Datasets scored by polyrl's exact evaluator instead of upstream's ``score_answer``."""


def replace_eval(dataset: str, dataset_cls: type) -> None:
    """Point the name ``eval`` in the dataset's module at :func:`literal` (module globals shadow builtins)."""
    if dataset in EVAL_SCORERS:
        sys.modules[dataset_cls.__module__].eval = literal


def exact_target_score(answer: str, numbers: list[int], target: int) -> float | tuple[float, str]:
    """1 when ``answer`` combines exactly ``numbers`` (as a multiset) with ``+ - * /`` into ``target``, else 0."""
    try:
        value, used = evaluate_expression(answer, max_chars=400, max_depth=32, max_digits=8)
    except ZeroDivisionError:
        return 0.0, "division_by_zero"
    except ValueError:
        return 0.0, "malformed"
    if sorted(used) != sorted(numbers):
        return 0.0, "wrong_numbers"
    return float(value == target)


def guard_answer(dataset: str, answer: str, entry: Any) -> float | tuple[float, str] | None:
    """polyrl's score for ``answer`` where it decides before the upstream scorer, else None (ask upstream)."""
    metadata = entry.get("metadata", {}) if isinstance(entry, dict) else {}
    if dataset in EXACT_TARGET:
        return exact_target_score(answer, list(metadata["numbers"]), metadata.get("target", 24))
    if dataset in EXPRESSION_SCORERS and not bounded_expression(answer):
        return 0.0, "unsafe_expression"
    return None
