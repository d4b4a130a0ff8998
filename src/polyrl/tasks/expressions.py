"""Guards for verifiers that hand model text to ``eval``, ``ast.literal_eval`` or ``sympy.parse_expr``.

:func:`bounded_expression` accepts only arithmetic a computer algebra system can evaluate quickly: numbers
of bounded size, names, ``+ - * / **`` with small literal exponents (no power towers such as ``9**9**9``)
and calls of a few named functions; no attributes, subscripts, lambdas, strings or dunder names. What
passes it cannot run code when parsed by sympy. :func:`literal` replaces ``eval`` where a scorer only
wants a Python literal (a list of characters, a matrix).
"""

from __future__ import annotations

import ast

MAX_EXPRESSION_CHARS = 20_000
"""Longer expressions are not handed to a computer algebra system."""
MAX_EXPONENT = 100
"""Largest absolute literal exponent."""
MAX_DIGITS = 400
"""Most digits in one number."""
FUNCTIONS = frozenset(
    {"sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "exp", "log", "ln", "sqrt", "Abs"}
)
"""Functions an expression may call (each on bounded arguments, so each is fast)."""

_BINARY = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)
_UNARY = (ast.UAdd, ast.USub)


def _small_exponent(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, _UNARY):
        node = node.operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):  # x**(1/2)
        return _small_exponent(node.left) and _small_exponent(node.right)
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
        and abs(node.value) <= MAX_EXPONENT
    )


def _contains_power(node: ast.expr) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) for n in ast.walk(node))


def _allowed(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        value = node.value
        return isinstance(value, (int, float)) and not isinstance(value, bool) and len(repr(value)) <= MAX_DIGITS
    if isinstance(node, ast.Name):
        return not node.id.startswith("_") and len(node.id) <= 16
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, _UNARY)
    if isinstance(node, ast.BinOp):
        if not isinstance(node.op, _BINARY):
            return False
        # a literal exponent, and none inside the base: (9**99)**99 is as bad as 9**9**9
        return not isinstance(node.op, ast.Pow) or (_small_exponent(node.right) and not _contains_power(node.left))
    if isinstance(node, ast.Call):
        return (
            isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and not node.keywords and len(node.args) <= 2
        )
    return isinstance(node, (ast.Expression, ast.Load, *_BINARY, *_UNARY))


def bounded_expression(text: str) -> bool:
    """Whether ``text`` is a bounded arithmetic expression (see the module docstring): safe to ``parse_expr``."""
    if len(text) > MAX_EXPRESSION_CHARS:
        return False
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return all(_allowed(node) for node in ast.walk(tree))


def literal(text: str):
    """A Python literal (numbers, strings, lists, tuples, dicts…) parsed without running code; ``eval``'s stand-in.

    Raises ValueError (also for text too long or nested too deeply).
    """
    if not isinstance(text, str) or len(text) > 20_000:
        raise ValueError("not a short literal")
    try:
        return ast.literal_eval(text.strip())
    except (SyntaxError, TypeError, MemoryError, RecursionError) as err:
        raise ValueError(f"not a literal: {err}") from None
