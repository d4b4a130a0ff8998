"""Grid tasks: mazes, islands, grid transformations; sudoku and n-queens live in ``grid_puzzles``.

Grids are written row by row, rows separated by ``/`` (``S.#/..E``); answers that are grids use the
same syntax, with newlines or spaces between rows also accepted.
"""

from __future__ import annotations

import string
from collections import deque

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_char_grid, parse_int, parse_letters
from polyrl.tasks.builtin._text import positional_credit, random_letters
from polyrl.tasks.task_registry import register_task

_STEPS = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def _find(rows: list[str], ch: str) -> tuple[int, int]:
    for r, row in enumerate(rows):
        c = row.find(ch)
        if c >= 0:
            return r, c
    raise ValueError(f"no {ch!r} in grid")


def maze_moves(rows: list[str], start: tuple[int, int], goal: tuple[int, int]) -> str | None:
    """A shortest move string from start to goal by breadth-first search, or None if unreachable."""
    h, w = len(rows), len(rows[0])
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            moves = []
            while came[cell] is not None:
                cell, m = came[cell]
                moves.append(m)
            return "".join(reversed(moves))
        for m, (dr, dc) in _STEPS.items():
            r, c = cell[0] + dr, cell[1] + dc
            if 0 <= r < h and 0 <= c < w and rows[r][c] != "#" and (r, c) not in came:
                came[(r, c)] = (cell, m)
                queue.append((r, c))
    return None


def random_maze(rng, n: int, wall_share: float) -> tuple[list[str], str]:
    """An ``n`` x ``n`` maze (rows of ``#`` walls, ``.`` floor, ``S`` start, ``E`` exit), each cell a wall with
    chance ``wall_share``, and a shortest move string from S to E; drawn again until E can be reached."""
    while True:
        cells = [["#" if rng.random() < wall_share else "." for _ in range(n)] for _ in range(n)]
        free = [(r, c) for r in range(n) for c in range(n) if cells[r][c] == "."]
        if len(free) < 2:
            continue
        start, goal = rng.sample(free, 2)
        cells[start[0]][start[1]], cells[goal[0]][goal[1]] = "S", "E"
        rows = ["".join(row) for row in cells]
        moves = maze_moves(rows, start, goal)
        if moves:
            return rows, moves


@register_task("maze_path")
class MazePath(Task):
    category = "grid"
    pure = True
    description = "Walk a grid maze from S to E with moves U/D/L/R; any shortest path scores 1, longer ones partial."
    params = (
        Param("size", 3, 12, "maze side"),
        Param("wall_share", 0.2, 0.35, "share of cells that are walls", integer=False),
    )
    partial_credit = True
    answer_shape = "one letter per move"

    def make(self, rng, p):
        rows, moves = random_maze(rng, p["size"], p["wall_share"])
        # "the letters U, D, L and R" in the answer sentence: SmolLM2 answered "U, D, L, R" after SFT
        statement = (
            "Find a shortest walk through this maze from S to E. Each line is a row; # is a wall, . is open "
            "floor. Each move goes one cell up, down, left or right, never into a wall or off the grid."
            f"\n{chr(10).join(rows)}\n"
            "Answer with one letter per move, in order, written together without spaces or commas: U for "
            "up, D for down, L for left, R for right; RRDL, for example, is right, right, down, left."
        )
        question = f"maze {'/'.join(rows)}; moves U/D/L/R"
        return Example(question, {"maze": rows, "steps": len(moves)}, moves, statement)

    def check(self, answer: str, problem: Problem):
        return walk_score(problem.answer["maze"], problem.answer["steps"], answer)


def walk_score(rows: list[str], steps: int, answer: str) -> float | tuple[float, str]:
    """The score of the moves ``answer`` (letters U/D/L/R) through maze ``rows`` (``#`` walls, ``S`` start, ``E``
    exit) whose shortest walk takes ``steps`` moves: 1 for a shortest walk, partial for a longer one, else wrong."""
    moves = parse_letters(answer, "UDLR")
    r, c = _find(rows, "S")
    for m in moves:
        dr, dc = _STEPS[m]
        r, c = r + dr, c + dc
        if not (0 <= r < len(rows) and 0 <= c < len(rows[0])) or rows[r][c] == "#":
            return 0.0, "wrong"
    if rows[r][c] != "E":
        return 0.0, "wrong"
    # A detour reaches the exit but wastes steps: credit shrinks with the waste, below a full solve.
    return 1.0 if len(moves) == steps else 0.5 * steps / len(moves)


def _count_islands(rows: list[str]) -> int:
    h, w = len(rows), len(rows[0])
    seen = [[False] * w for _ in range(h)]
    count = 0
    for r0 in range(h):
        for c0 in range(w):
            if rows[r0][c0] != "#" or seen[r0][c0]:
                continue
            count += 1
            seen[r0][c0] = True
            stack = [(r0, c0)]
            while stack:  # iterative flood fill: no recursion limit on large islands
                r, c = stack.pop()
                for dr, dc in _STEPS.values():
                    rr, cc = r + dr, c + dc
                    if 0 <= rr < h and 0 <= cc < w and rows[rr][cc] == "#" and not seen[rr][cc]:
                        seen[rr][cc] = True
                        stack.append((rr, cc))
    return count


@register_task("count_islands")
class CountIslands(Task):
    category = "grid"
    pure = True
    description = "Count the islands (4-connected groups of #) in a grid."
    params = (
        Param("size", 3, 14, "grid side"),
        Param("land_share", 0.35, 0.5, "share of cells that are land", integer=False),
    )
    answer_shape = "a single integer"

    def make(self, rng, p):
        n = p["size"]
        rows = ["".join("#" if rng.random() < p["land_share"] else "." for _ in range(n)) for _ in range(n)]
        count = _count_islands(rows)
        statement = (
            "In this grid, # is land and . is water; each line is a row. An island is a group of land cells joined "
            "up, down, left or right (not diagonally). How many islands are there?\n"
            f"{chr(10).join(rows)}\nAnswer with a single integer: the number of islands."
        )
        return Example(f"islands {'/'.join(rows)}", count, str(count), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)


_TRANSFORM_WORDS = {
    "rot90": "rotate it 90 degrees clockwise",
    "rot180": "rotate it 180 degrees",
    "rot270": "rotate it 90 degrees counterclockwise",
    "transpose": "transpose it (row i becomes column i)",
    "fliph": "mirror it left to right",
    "flipv": "mirror it top to bottom",
}


def _transform(rows: list[str], op: str) -> list[str]:
    if op == "rot90":  # clockwise
        return ["".join(col) for col in zip(*reversed(rows))]
    if op == "rot180":
        return [row[::-1] for row in reversed(rows)]
    if op == "rot270":
        return ["".join(col) for col in zip(*rows)][::-1]
    if op == "transpose":
        return ["".join(col) for col in zip(*rows)]
    if op == "fliph":  # mirror left-right
        return [row[::-1] for row in rows]
    if op == "flipv":  # mirror top-bottom
        return rows[::-1]
    raise ValueError(op)


@register_task("grid_transform")
class GridTransform(Task):
    category = "grid"
    pure = True
    description = "Apply rotations (clockwise), transposes and flips to a letter grid, left to right."
    params = (
        Param("size", 2, 8, "largest grid side"),
        Param("ops", 1, 3, "operations applied in sequence"),
    )
    partial_credit = True
    _OPS = ("rot90", "rot180", "rot270", "transpose", "fliph", "flipv")
    answer_shape = "rows separated by /"

    def make(self, rng, p):
        h, w = rng.randint(2, p["size"]), rng.randint(2, p["size"])
        rows = [random_letters(rng, w) for _ in range(h)]
        ops = [rng.choice(self._OPS) for _ in range(p["ops"])]
        out = rows
        for op in ops:
            out = _transform(out, op)
        steps = "; then ".join(_TRANSFORM_WORDS[op] for op in ops)
        statement = (
            f"Take this grid of letters, one row per line:\n{chr(10).join(rows)}\nApply, in this order: {steps}.\n"
            f"Answer with the resulting grid, all its {len(out)} rows of {len(out[0])} letters, top row first, rows "
            "separated by / and the letters of a row written together."
        )
        return Example(f"{','.join(ops)} {'/'.join(rows)}", out, "/".join(out), statement)

    def check(self, answer: str, problem: Problem):
        target = problem.answer
        rows = parse_char_grid(answer, len(target), len(target[0]), string.ascii_lowercase)
        return positional_credit("".join(rows), "".join(target))  # same shape: cell by cell
