"""Small, total parsers shared by built-in verifiers."""

from __future__ import annotations

import re
from fractions import Fraction

_INT_RE = re.compile(r"[+-]?\d{1,400}")


def parse_int(text: str) -> int:
    """An integer written plainly (commas/underscores/spaces between digits allowed). Raises ValueError."""
    s = text.strip().replace(",", "").replace("_", "").replace(" ", "")
    if not _INT_RE.fullmatch(s):
        raise ValueError(f"not an integer: {text[:40]!r}")
    return int(s)


def parse_int_list(text: str, max_items: int = 10_000) -> list[int]:
    """Integers separated by commas and/or whitespace, optionally in brackets. Raises ValueError."""
    s = text.strip()
    if s[:1] in "[(" and s[-1:] in "])":
        s = s[1:-1]
    parts = [p for p in re.split(r"[,\s]+", s) if p]
    if len(parts) > max_items:
        raise ValueError("too many items")
    return [parse_int(p) for p in parts]


_ROW_SPLIT_RE = re.compile(r"[/\n;]")
_CELL_SEP_RE = re.compile(r"[\s,|]+")


def parse_char_grid(text: str, n_rows: int, n_cols: int, alphabet: str) -> list[str]:
    """A grid of one-character cells, rows separated by ``/``, ``;`` or newlines.

    Spaces, commas and ``|`` between cells are ignored; with no row separator at all, the cells are
    read row by row. Raises ValueError on the wrong shape or a character outside ``alphabet``.
    """
    s = text.strip()
    if _ROW_SPLIT_RE.search(s):
        rows = [_CELL_SEP_RE.sub("", r) for r in _ROW_SPLIT_RE.split(s)]
        rows = [r for r in rows if r]
    else:
        flat = _CELL_SEP_RE.sub("", s)
        rows = [flat[i : i + n_cols] for i in range(0, len(flat), n_cols)] if n_cols else []
    if len(rows) != n_rows or any(len(r) != n_cols for r in rows):
        raise ValueError(f"expected {n_rows} rows of {n_cols} cells")
    allowed = set(alphabet)
    if any(ch not in allowed for r in rows for ch in r):
        raise ValueError("unexpected cell character")
    return rows


def parse_int_grid(text: str, n_rows: int, n_cols: int) -> list[list[int]]:
    """A grid of integers: rows separated by ``/``, ``;`` or newlines, cells by spaces or commas.

    With no row separator, the integers are read row by row. Raises ValueError on the wrong shape.
    """
    s = text.strip()
    if _ROW_SPLIT_RE.search(s):
        parts = [r for r in _ROW_SPLIT_RE.split(s) if r.strip()]
        if len(parts) != n_rows:  # before parsing, so thousands of junk rows cost nothing
            raise ValueError(f"expected {n_rows} rows")
        rows = [parse_int_list(r, n_cols) for r in parts]
    else:
        flat = parse_int_list(s, n_rows * n_cols)
        rows = [flat[i : i + n_cols] for i in range(0, len(flat), n_cols)] if n_cols else []
    if len(rows) != n_rows or any(len(r) != n_cols for r in rows):
        raise ValueError(f"expected {n_rows} rows of {n_cols} numbers")
    return rows


def parse_letters(text: str, alphabet: str) -> str:
    """Upper-cased letters from ``alphabet`` with spaces, commas and ``-``/``>`` arrows ignored (``"R R D"`` -> ``"RRD"``).

    Raises ValueError on any other character.
    """
    s = "".join(text.split()).replace(",", "").replace("-", "").replace(">", "").upper()  # faster than a regex
    if not s or s.strip(alphabet):  # strip leaves nothing exactly when every letter is allowed
        raise ValueError(f"expected letters from {alphabet}")
    return s


_RATIONAL_RE = re.compile(r"([+-]?)(\d{1,400})(?:/(\d{1,400})|\.(\d{1,400}))?")


def parse_rational(text: str) -> Fraction:
    """An integer, ``p/q`` or a finite decimal, exactly. No exponents, so no huge values. Raises ValueError."""
    s = text.strip().replace(" ", "")
    m = _RATIONAL_RE.fullmatch(s)
    if not m:
        raise ValueError(f"not a number: {text[:40]!r}")
    sign, whole, den, decimals = m.groups()
    value = (
        Fraction(int(whole), int(den)) if den else Fraction(int(whole + (decimals or "")), 10 ** len(decimals or ""))
    )
    return -value if sign == "-" else value


_TRUE_WORDS = frozenset({"1", "true", "t", "yes", "y"})
_FALSE_WORDS = frozenset({"0", "false", "f", "no", "n"})


def parse_bool(text: str) -> bool:
    """``true/false``, ``yes/no``, ``1/0`` or ``t/f`` in any case, with trailing punctuation. Raises ValueError."""
    s = text.strip().strip(".!").strip().lower()
    if s in _TRUE_WORDS:
        return True
    if s in _FALSE_WORDS:
        return False
    raise ValueError(f"not a truth value: {text[:40]!r}")


_PAIR_RE = re.compile(r"([A-Za-z][A-Za-z0-9_]{0,15})\s*(?:=|:|->|\bis\b(?:\s+an?\b)?)\s*([A-Za-z0-9]{1,16})")
_PAIR_SEPARATORS_RE = re.compile(r"(?:[\s,;{}()\[\]\"'.]|\band\b)*")


def parse_assignment(text: str, max_pairs: int = 1_000, upper: bool = False) -> dict[str, str]:
    """``name=value`` pairs (also ``name: value``, ``name is value``) separated by commas, spaces, ``and``.

    Anything between the pairs other than separators makes the text malformed (ValueError), so that prose
    with a stray ``x=1`` in it is not mistaken for an assignment. A name given twice is an error too; with
    ``upper`` names are upper-cased first, so ``A=1 a=2`` names A twice.
    """
    pairs = _PAIR_RE.findall(text)
    if not pairs or len(pairs) > max_pairs:
        raise ValueError("no name=value pairs" if not pairs else "too many pairs")
    if not _PAIR_SEPARATORS_RE.fullmatch(_PAIR_RE.sub(" ", text)):
        raise ValueError(f"unexpected text in assignment: {text[:40]!r}")
    out: dict[str, str] = {}
    for name, value in pairs:
        name = name.upper() if upper else name
        if name in out:
            raise ValueError(f"{name} assigned twice")
        out[name] = value
    return out


_EXPR_ALIASES = str.maketrans({"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-", "[": "(", "]": ")"})
_EXPR_TOKEN_RE = re.compile(r"\s*(?:(\d+)|([-+*/()]))")
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def _apply(values: list[Fraction], op: str) -> None:
    b, a = values.pop(), values.pop()
    if op == "+":
        values.append(a + b)
    elif op == "-":
        values.append(a - b)
    elif op == "*":
        values.append(a * b)
    else:
        values.append(a / b)  # ZeroDivisionError is the caller's "wrong", not a crash


def evaluate_expression(
    text: str, max_chars: int = 200, max_depth: int = 16, max_digits: int = 12
) -> tuple[Fraction, list[int]]:
    """Value and operand list of an arithmetic expression over ``+ - * /`` and parentheses, exactly.

    Shunting-yard evaluation: iterative (no recursion on nesting), linear in the length, and bounded in the
    length, nesting depth and operand size so adversarial input costs microseconds. Unary minus is not
    accepted: countdown-style answers must combine the given numbers only. A stated result (``... = 24``)
    must be the expression's value; a bare trailing ``=`` states nothing. Raises ValueError on malformed
    input or a wrong stated result, and ZeroDivisionError on division by zero.
    """
    s, equals, stated = text.translate(_EXPR_ALIASES).partition("=")
    s = s.strip()
    if not s or len(s) > max_chars:
        raise ValueError("empty or too long expression")
    value, operands = _shunting_yard(s, max_depth, max_digits)
    if equals and stated.strip() and parse_rational(stated) != value:  # "12*3=" states nothing
        raise ValueError("the stated result is not the expression's value")
    return value, operands


def _shunting_yard(s: str, max_depth: int, max_digits: int) -> tuple[Fraction, list[int]]:
    values: list[Fraction] = []
    operands: list[int] = []
    ops: list[str] = []
    depth, pos, expect_operand = 0, 0, True
    while pos < len(s):
        m = _EXPR_TOKEN_RE.match(s, pos)
        if not m:
            raise ValueError(f"unexpected character {s[pos]!r}")
        pos = m.end()
        number, tok = m.groups()
        if number is not None:
            if not expect_operand or len(number) > max_digits:
                raise ValueError("misplaced or too long number")
            values.append(Fraction(int(number)))
            operands.append(int(number))
            expect_operand = False
        elif tok == "(":
            depth += 1
            if not expect_operand or depth > max_depth:
                raise ValueError("misplaced or too deep parenthesis")
            ops.append(tok)
        elif tok == ")":
            if expect_operand:
                raise ValueError("empty parentheses or dangling operator")
            while ops and ops[-1] != "(":
                _apply(values, ops.pop())
            if not ops:
                raise ValueError("unbalanced parentheses")
            ops.pop()
            depth -= 1
        else:
            if expect_operand:
                raise ValueError(f"operator {tok!r} without a left operand")
            while ops and ops[-1] != "(" and _PRECEDENCE[ops[-1]] >= _PRECEDENCE[tok]:
                _apply(values, ops.pop())
            ops.append(tok)
            expect_operand = True
    if expect_operand:
        raise ValueError("expression ends with an operator")
    while ops:
        op = ops.pop()
        if op == "(":
            raise ValueError("unbalanced parentheses")
        _apply(values, op)
    return values[0], operands
