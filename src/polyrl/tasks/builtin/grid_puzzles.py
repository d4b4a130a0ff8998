"""Grid placement puzzles: sudoku and n-queens. Any placement that satisfies the rules scores 1."""

from __future__ import annotations

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_char_grid, parse_int_list
from polyrl.tasks.task_registry import register_task

_DIGITS = "123456789"


def _box_shape(size: int) -> tuple[int, int]:
    """(rows, cols) of a box for the largest standard sudoku side <= ``size``: 4, 6 (2x3 boxes) or 9."""
    if size >= 9:
        return 3, 3
    if size >= 6:
        return 2, 3
    return 2, 2


def _filled_sudoku(rng, br: int, bc: int) -> list[list[int]]:
    """A random complete grid: a patterned valid grid shuffled by validity-preserving permutations.

    Not uniform over all grids, but no search is needed, so generation stays fast at 9x9.
    """
    n = br * bc
    # Row r shifts by a box width within a band and by one between bands: every row, column and box
    # then holds each value once.
    base = [[(bc * (r % br) + r // br + c) % n for c in range(n)] for r in range(n)]
    bands = rng.sample(range(n // br), n // br)
    rows = [b * br + r for b in bands for r in rng.sample(range(br), br)]
    stacks = rng.sample(range(n // bc), n // bc)
    cols = [s * bc + c for s in stacks for c in rng.sample(range(bc), bc)]
    digits = rng.sample(range(1, n + 1), n)
    grid = [[digits[base[r][c]] for c in cols] for r in rows]
    if br == bc and rng.random() < 0.5:
        grid = [list(col) for col in zip(*grid)]
    return grid


def _sudoku_valid(rows: list[str], br: int, bc: int) -> bool:
    n = br * bc
    want = set(_DIGITS[:n])
    if any(set(r) != want for r in rows):
        return False
    if any(set(col) != want for col in zip(*rows)):
        return False
    for r0 in range(0, n, br):
        for c0 in range(0, n, bc):
            if {rows[r][c] for r in range(r0, r0 + br) for c in range(c0, c0 + bc)} != want:
                return False
    return True


@register_task("sudoku")
class Sudoku(Task):
    category = "grid"
    pure = True
    description = "Fill the blanks of a sudoku (4x4, 6x6 with 2x3 boxes, or 9x9); any valid completion counts."
    params = (
        Param("size", 4, 9, "grid side; rounded down to 4, 6 or 9"),
        Param("blank_share", 0.125, 0.62, "share of cells left blank", integer=False),
    )
    answer_shape = "rows separated by /"

    def make(self, rng, p):
        br, bc = _box_shape(p["size"])
        n = br * bc
        grid = _filled_sudoku(rng, br, bc)
        blanks = set(rng.sample(range(n * n), max(1, round(p["blank_share"] * n * n))))
        puzzle = ["".join("." if r * n + c in blanks else str(grid[r][c]) for c in range(n)) for r in range(n)]
        boxes = " (2x3 boxes)" if (br, bc) == (2, 3) else ""
        solution = "/".join("".join(map(str, row)) for row in grid)
        statement = (
            f"Solve this {n}x{n} sudoku: replace each . by a digit from 1 to {n} so that every row, every column "
            f"and every {br}x{bc} box (of {br} rows and {bc} columns) holds each digit once. One row per line:\n"
            f"{chr(10).join(puzzle)}\n"
            f"Answer with the completed grid: the {n} rows above with each . replaced by its digit, top row first, "
            f"{n} digits per row, rows separated by /."
        )
        answer = {"puzzle": puzzle, "box": [br, bc]}
        return Example(f"sudoku{boxes} {'/'.join(puzzle)}", answer, solution, statement)

    def check(self, answer: str, problem: Problem):
        puzzle = problem.answer["puzzle"]
        br, bc = problem.answer["box"]
        n = br * bc
        rows = parse_char_grid(answer, n, n, _DIGITS[:n])
        for given, row in zip(puzzle, rows):
            if any(g != "." and g != ch for g, ch in zip(given, row)):
                return 0.0, "wrong"
        return float(_sudoku_valid(rows, br, bc))


def _random_queens(rng, n: int, fixed: dict[int, int]) -> list[int]:
    """A random n-queens placement (column per row) extending ``fixed``, by randomized backtracking."""
    cols: list[int] = []
    used_c, used_d, used_a = set(), set(), set()

    def place(r: int) -> bool:
        if r == n:
            return True
        options = [fixed[r]] if r in fixed else rng.sample(range(n), n)
        for c in options:
            if c in used_c or r - c in used_d or r + c in used_a:
                continue
            cols.append(c)
            used_c.add(c), used_d.add(r - c), used_a.add(r + c)
            if place(r + 1):
                return True
            cols.pop()
            used_c.discard(c), used_d.discard(r - c), used_a.discard(r + c)
        return False

    place(0)  # recursion depth is n <= 12
    return cols


def _queens_valid(cols: list[int]) -> bool:
    n = len(cols)
    return (
        len(set(cols)) == n
        and len({r - c for r, c in enumerate(cols)}) == n
        and len({r + c for r, c in enumerate(cols)}) == n
    )


@register_task("n_queens")
class NQueens(Task):
    category = "grid"
    pure = True
    description = "Place n non-attacking queens, one per row, keeping the given ones; any valid placement counts."
    params = (
        Param("n", 4, 12, "board side and number of queens"),
        Param("given", 0, 3, "queens already placed"),
    )
    answer_shape = "integers separated by spaces"

    def make(self, rng, p):
        n = p["n"]
        cols = _random_queens(rng, n, {})
        shown = set(rng.sample(range(n), min(p["given"], n)))
        spec = " ".join(str(cols[r] + 1) if r in shown else "?" for r in range(n))
        given = [cols[r] + 1 if r in shown else 0 for r in range(n)]
        kept = ", ".join(f"row {r + 1} column {cols[r] + 1}" for r in sorted(shown))
        statement = (
            f"Place {n} queens on a {n}x{n} chessboard, one in each row, so that no two share a column or a "
            f"diagonal. Rows and columns are numbered 1 to {n}."
            + (f" These queens are already placed and stay: {kept}." if kept else "")
            + f"\nAnswer with the column of the queen in each row, top row first: {n} integers separated by spaces."
        )
        solution = " ".join(str(c + 1) for c in cols)
        return Example(f"queens {n}, column per row: {spec}", {"given": given}, solution, statement)

    def check(self, answer: str, problem: Problem):
        given = problem.answer["given"]
        n = len(given)
        cols = parse_int_list(answer, n)
        if len(cols) != n or any(not 1 <= c <= n for c in cols):
            return 0.0, "malformed"
        if any(g and g != c for g, c in zip(given, cols)):
            return 0.0, "wrong"
        return float(_queens_valid(cols))
