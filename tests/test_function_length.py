"""Function length: no function or method in src/polyrl is longer than 80 lines (its ``def`` line to its last line,
docstring and blank lines included), so each one can be read on one screen and does one job."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "polyrl"
LIMIT = 80


def long_functions(source: str, limit: int = LIMIT) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of every function in ``source`` longer than ``limit`` lines, nested
    functions and methods included."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1
                    if length > limit:
                        found.append((name, child.lineno, length))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_a_function_over_the_limit_is_named_with_its_line_and_length():
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    source = f"class A:\n    def short(self):\n        return 1\n\n    def long(self):\n{body.replace('    ', '        ')}\n"
    source += f"\n\ndef exactly_80():\n{body[: body.rindex(chr(10))]}\n"
    assert long_functions(source) == [("A.long", 5, 81)]


def test_no_function_in_src_is_longer_than_80_lines():
    files = sorted(SRC.rglob("*.py"))
    assert files, f"no sources under {SRC}"
    offenders = [
        f"{path.relative_to(SRC.parents[1])}:{line} {name} ({length} lines)"
        for path in files
        for name, line, length in long_functions(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"functions over {LIMIT} lines (split them into named pieces):\n" + "\n".join(offenders)
