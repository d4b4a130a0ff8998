"""Visual puzzles: a jigsaw of shuffled tiles to put back in order, and a maze drawn as a picture.

As in :mod:`polyrl.tasks.builtin.visual`, each problem carries one picture drawn with integer arithmetic from the
problem's random stream, and its answer is checked by rule from what was stored when the picture was drawn.
"""

from __future__ import annotations

import numpy as np

from polyrl.tasks.base import Example, Param, Problem
from polyrl.tasks.builtin._draw import WHITE, Canvas
from polyrl.tasks.builtin._parse import parse_int, parse_int_list
from polyrl.tasks.builtin.grid import random_maze, walk_score
from polyrl.tasks.builtin.visual import SHAPE_COLORS, VisualTask
from polyrl.tasks.task_registry import register_task

TILE = 16
"""Side of a jigsaw tile in pixels."""
TILE_GAP = 2
"""White pixels between the shown tiles."""


def jigsaw_picture(rng, side: int, contrast: float, shapes: int, noise: int) -> Canvas:
    """The whole picture before it is cut: a colour gradient (red grows to the right, green downwards, by up to
    ``contrast`` x 160 levels) under ``shapes`` filled shapes, with pixel noise."""
    n = side * TILE
    base = [rng.randint(30, 90) for _ in range(3)]
    steps = round(contrast * 160)
    ramp = np.arange(n) * steps // (n - 1)
    canvas = Canvas(n, n)
    canvas.pixels[:, :, 0] = base[0] + ramp[None, :]
    canvas.pixels[:, :, 1] = base[1] + ramp[:, None]
    canvas.pixels[:, :, 2] = base[2]
    for _ in range(shapes):
        size = rng.randint(TILE // 2, TILE + TILE // 2)
        kind = rng.choice(("circle", "square", "triangle"))
        canvas.shape(
            kind, rng.randint(0, n - size), rng.randint(0, n - size), size, rng.choice(list(SHAPE_COLORS.values()))
        )
    canvas.noise(rng, noise)
    return canvas


def cut_tiles(pixels: np.ndarray, side: int) -> list[np.ndarray]:
    """The ``side`` x ``side`` tiles of a picture, row by row from the top left."""
    return [pixels[r * TILE : (r + 1) * TILE, c * TILE : (c + 1) * TILE] for r in range(side) for c in range(side)]


def tile_classes(tiles: list[np.ndarray]) -> list[int]:
    """For each tile, the index of the first tile with exactly its pixels (equal tiles are interchangeable)."""
    first: dict[bytes, int] = {}
    return [first.setdefault(t.tobytes(), i) for i, t in enumerate(tiles)]


@register_task("jigsaw")
class Jigsaw(VisualTask):
    description = "Put the shuffled tiles of a picture back in order: say which shown tile goes in each place."
    params = (
        Param("side", 2, 4, "tiles per row and per column"),
        Param("contrast", 1.0, 0.3, "strength of the colour gradient across the picture", integer=False),
        Param("shapes", 1, 6, "shapes drawn over the gradient"),
        Param("noise", 0, 20, "largest change of a colour channel by pixel noise"),
    )
    partial_credit = True
    answer_shape = "integers separated by spaces"

    def make(self, rng, p):
        side = p["side"]
        picture = jigsaw_picture(rng, side, p["contrast"], p["shapes"], p["noise"])
        tiles = cut_tiles(picture.pixels, side)
        n = len(tiles)
        shown = list(range(n))
        while shown == sorted(shown):  # never the picture as it was
            rng.shuffle(shown)
        width = side * TILE + (side - 1) * TILE_GAP
        canvas = Canvas(width, width, WHITE)
        for place, tile in enumerate(shown):
            y, x = (TILE + TILE_GAP) * (place // side), (TILE + TILE_GAP) * (place % side)
            canvas.pixels[y : y + TILE, x : x + TILE] = tiles[tile]
        classes = tile_classes(tiles)
        solution = " ".join(str(shown.index(tile) + 1) for tile in range(n))
        answer = {"side": side, "shown": [classes[t] for t in shown], "target": classes}
        statement = (
            f"The picture was cut into a {side}x{side} grid of square tiles, which were shuffled; white lines separate "
            f"them. Number the tiles as shown from 1 to {n}, row by row from the top left. Put the picture back "
            "together: which tile belongs in each place?\n"
            f"Answer with {n} integers separated by spaces: for each place of the restored picture, row by row from "
            "the top left, the number of the shown tile that goes there."
        )
        return Example(f"jigsaw {side}x{side}: order?", answer, solution, statement, images=(canvas.image(),))

    def check(self, answer: str, problem: Problem):
        shown, target = problem.answer["shown"], problem.answer["target"]
        order = parse_int_list(answer, max_items=len(target))
        if sorted(order) != list(range(1, len(target) + 1)):
            return 0.0, "malformed"  # not each tile once
        right = sum(shown[tile - 1] == want for tile, want in zip(order, target))
        if right == len(target):
            return 1.0
        return (0.5 * right / len(target), "partial") if right else (0.0, "wrong")


# -- a drawn maze -------------------------------------------------------------------------------------------
MAZE_CELL = 8
"""Pixels per maze cell, its grey border line included."""
MAZE_COLORS = {"#": (40, 40, 40), ".": WHITE, "S": (40, 160, 60), "E": (220, 40, 40)}
MAZE_LINES = (190, 190, 190)


def maze_picture(rows: list[str], rng, noise: int):
    """Maze ``rows`` drawn as cells of :data:`MAZE_CELL` pixels in a grey grid: walls dark, floor white, the start
    green, the exit red."""
    n = len(rows)
    canvas = Canvas(n * MAZE_CELL + 1, n * MAZE_CELL + 1, MAZE_LINES)
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            canvas.rect(1 + c * MAZE_CELL, 1 + r * MAZE_CELL, MAZE_CELL - 1, MAZE_CELL - 1, MAZE_COLORS[cell])
    canvas.noise(rng, noise)
    return canvas.image()


def _maze_words(n: int) -> str:
    return (
        f"The picture is a maze of {n}x{n} square cells in a grey grid: dark cells are walls, white cells are open "
        "floor, the green cell is the start and the red cell is the exit. A move goes one cell up, down, left or "
        "right, never into a wall or off the grid."
    )


MAZE_PARAMS = (
    Param("size", 4, 12, "cells per side"),
    Param("wall_share", 0.15, 0.35, "share of cells that are walls", integer=False),
    Param("noise", 0, 30, "largest change of a colour channel by pixel noise"),
)


@register_task("maze_steps")
class MazeSteps(VisualTask):
    description = "Count the moves of a shortest walk through a maze drawn as a picture, from green to red."
    params = MAZE_PARAMS
    answer_shape = "a single integer"

    def make(self, rng, p):
        rows, moves = random_maze(rng, p["size"], p["wall_share"])
        statement = (
            f"{_maze_words(p['size'])} How many moves does a shortest walk from the start to the exit take?\n"
            "Answer with a single integer: the number of moves."
        )
        image = maze_picture(rows, rng, p["noise"])
        return Example("fewest moves green to red?", len(moves), str(len(moves)), statement, images=(image,))

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)


@register_task("maze_moves")
class MazeMoves(VisualTask):
    description = "Walk a maze drawn as a picture from green to red; any shortest walk scores 1, longer ones partial."
    params = MAZE_PARAMS
    partial_credit = True
    answer_shape = "one letter per move"

    def make(self, rng, p):
        rows, moves = random_maze(rng, p["size"], p["wall_share"])
        statement = (
            f"{_maze_words(p['size'])} Find a shortest walk from the start to the exit.\n"
            "Answer with one letter per move, in order, written together without spaces or commas: U for up, D for "
            "down, L for left, R for right."
        )
        image = maze_picture(rows, rng, p["noise"])
        answer = {"maze": rows, "steps": len(moves)}
        return Example("moves green to red? U/D/L/R", answer, moves, statement, images=(image,))

    def check(self, answer: str, problem: Problem):
        return walk_score(problem.answer["maze"], problem.answer["steps"], answer)
