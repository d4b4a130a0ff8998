"""Every visual task's answer is what its picture shows, and its verifier agrees with a brute-force oracle.

Each oracle reads the problem's pixels with its own few lines of code — the nearest colour of each pixel, connected
components, the ink of the 3x5 font, the cells of a drawn maze — never the task's stored answer or checker, and
judges candidate answers drawn mostly as near misses of the reference. The task judges the same candidates as text.
They must agree on every one: no false positives, no false negatives, whatever the noise and clutter.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyrl import get_task
from polyrl.tasks.base import rng_for
from polyrl.tasks.builtin._draw import FONT
from polyrl.tasks.builtin.visual import BAR, GRID, SHAPE_COLORS, SPECK
from polyrl.tasks.builtin.visual_puzzles import MAZE_CELL, MAZE_COLORS, TILE, TILE_GAP, jigsaw_picture

ORACLE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SEEDS = st.integers(0, 10_000)
LEVELS = st.one_of(st.sampled_from(["easy", "medium", "hard"]), st.floats(0, 1))


def _pixels(problem) -> np.ndarray:
    (image,) = problem.images
    return np.asarray(image, dtype=np.int32)


def _nearest(pixels: np.ndarray, palette: dict) -> np.ndarray:
    """Index (in ``palette``'s order) of the colour nearest to each pixel."""
    colors = np.array(list(palette.values()), dtype=np.int32)
    return ((pixels[:, :, None, :] - colors[None, None]) ** 2).sum(-1).argmin(-1)


def _components(mask: np.ndarray) -> list[list[tuple[int, int]]]:
    """4-connected groups of True pixels."""
    seen, groups = np.zeros_like(mask), []
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        seen[y0, x0], stack, group = True, [(y0, x0)], []
        while stack:
            y, x = stack.pop()
            group.append((y, x))
            for yy, xx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                if 0 <= yy < mask.shape[0] and 0 <= xx < mask.shape[1] and mask[yy, xx] and not seen[yy, xx]:
                    seen[yy, xx] = True
                    stack.append((yy, xx))
        groups.append(group)
    return groups


def _correct(problem, text) -> bool:
    return get_task(problem.task).verify(problem, f"<answer>{text}</answer>").correct


# -- count_shapes ----------------------------------------------------------------------------------------------
def _count_oracle(problem) -> int:
    """The shapes of the asked colour and kind, told apart by which corners of its bounding box a blob fills: a
    square all four, a triangle the bottom two, a circle none."""
    color, kind = problem.question.removeprefix("how many ").removesuffix("s?").split()
    palette = {"white": (255, 255, 255), "speck": SPECK, **SHAPE_COLORS}
    labels = _nearest(_pixels(problem), palette)
    count = 0
    for group in _components(labels == list(palette).index(color)):
        ys, xs = zip(*group)
        blob = set(group)
        top, bottom, left, right = min(ys), max(ys), min(xs), max(xs)
        corners = [(top, left) in blob, (top, right) in blob, (bottom, left) in blob, (bottom, right) in blob]
        seen = {4: "square", 0: "circle"}.get(
            sum(corners), "triangle" if corners == [False, False, True, True] else "?"
        )
        count += seen == kind
    return count


# -- bar charts ------------------------------------------------------------------------------------------------
def _bar_values(problem) -> list[int]:
    """Each bar's height in pixels over the grid's spacing, bars left to right."""
    labels = _nearest(_pixels(problem), {"white": (255, 255, 255), "grid": GRID, "ink": (20, 20, 20), "bar": BAR})
    baseline = int((labels == 2).sum(1).argmax())  # the black bottom line
    grid_rows = [y for y in range(baseline) if labels[y, 4] == 1]  # the column between the axis and the first bar
    unit = baseline - grid_rows[-1]
    assert np.diff(grid_rows).tolist() == [unit] * (len(grid_rows) - 1)
    bar_columns = [x for x in range(labels.shape[1]) if (labels[:baseline, x] == 3).any()]
    runs = np.split(np.array(bar_columns), np.nonzero(np.diff(bar_columns) > 1)[0] + 1)
    values = []
    for run in runs:
        middle = run[len(run) // 2]
        top = int(np.nonzero(labels[:baseline, middle] == 3)[0].min())
        assert (baseline - top) % unit == 0
        values.append((baseline - top) // unit)
    return values


def _tallest_bar(problem) -> str:
    """The letter of the one tallest bar."""
    values = _bar_values(problem)
    assert values.count(max(values)) == 1
    return "ABCDEFG"[values.index(max(values))]


def _asked_bar_value(problem) -> int:
    asked = "ABCDEFG".index(problem.question.removeprefix("value of bar ").removesuffix("?"))
    return _bar_values(problem)[asked]


# -- read_expression -------------------------------------------------------------------------------------------
def _glyph_key(rows) -> tuple[str, ...]:
    """A glyph cut to its ink: the font's own rows, or a read glyph's."""
    rows = [r for r in rows if "#" in r]
    first = min(r.index("#") for r in rows)
    last = max(r.rindex("#") for r in rows)
    return tuple(r[first : last + 1] for r in rows)


def _read_expression(problem) -> str:
    """The expression's characters: dark pixels, cut into glyphs at blank columns, matched against the font."""
    pixels = _pixels(problem)
    ink = pixels.mean(-1) < 100
    font = {_glyph_key(rows): ch for ch, rows in FONT.items()}
    columns = np.nonzero(ink.any(0))[0]
    text = ""
    for run in np.split(columns, np.nonzero(np.diff(columns) > 1)[0] + 1):
        glyph = ink[:, run[0] : run[-1] + 1]
        ys = np.nonzero(glyph.any(1))[0]
        cells = glyph[ys[0] : ys[-1] + 1 : 2, ::2]  # one font pixel is a 2x2 block
        text += font[_glyph_key(["".join("#" if c else "." for c in row) for row in cells])]
    return text


# -- jigsaw ----------------------------------------------------------------------------------------------------
def _shown_tiles(problem, side: int) -> list[np.ndarray]:
    pixels = _pixels(problem)
    step = TILE + TILE_GAP
    return [pixels[r * step : r * step + TILE, c * step : c * step + TILE] for r in range(side) for c in range(side)]


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_jigsaw_matches_oracle(seed, level, data):
    task = get_task("jigsaw")
    problem = task.generate(seed, level)
    p = problem.params
    # the picture before it was cut: the generator draws it first from the problem's stream
    picture = jigsaw_picture(rng_for("jigsaw", "train", seed, p), p["side"], p["contrast"], p["shapes"], p["noise"])
    source = picture.pixels.astype(np.int32)
    shown = _shown_tiles(problem, p["side"])
    n = len(shown)
    solution = [int(x) for x in problem.solution.split()]
    order = data.draw(
        st.one_of(
            st.just(solution),
            st.permutations(range(1, n + 1)),
            st.lists(st.integers(0, n + 1), min_size=n - 1, max_size=n + 1),
        )
    )

    def fits(o) -> bool:
        if sorted(o) != list(range(1, n + 1)):
            return False
        step = TILE
        restored = [
            source[r * step : (r + 1) * step, c * step : (c + 1) * step]
            for r in range(p["side"])
            for c in range(p["side"])
        ]
        return all(np.array_equal(shown[tile - 1], want) for tile, want in zip(o, restored))

    assert fits(solution)
    assert _correct(problem, " ".join(map(str, order))) == fits(order), order


# -- drawn mazes -----------------------------------------------------------------------------------------------
def _read_maze(problem) -> list[str]:
    """The maze's cells, from the colour at the middle of each cell."""
    pixels = _pixels(problem)
    n = (pixels.shape[0] - 1) // MAZE_CELL
    middles = pixels[1 + MAZE_CELL // 2 - 1 :: MAZE_CELL, 1 + MAZE_CELL // 2 - 1 :: MAZE_CELL][:n, :n]
    symbols = "".join(MAZE_COLORS)
    return ["".join(symbols[i] for i in row) for row in _nearest(middles, MAZE_COLORS)]


def _walk(rows, moves):
    """Where the moves end from S, or None if one leaves the grid or enters a wall."""
    (r, c) = next((r, row.index("S")) for r, row in enumerate(rows) if "S" in row)
    for m in moves:
        r, c = r + {"U": -1, "D": 1}.get(m, 0), c + {"L": -1, "R": 1}.get(m, 0)
        if not (0 <= r < len(rows) and 0 <= c < len(rows)) or rows[r][c] == "#":
            return None
    return r, c


def _fewest_moves(rows) -> int:
    """Breadth-first over move strings until one ends on E."""
    frontier, seen, depth = [""], set(), 0
    while frontier:
        following = []
        for moves in frontier:
            end = _walk(rows, moves)
            if end is None or end in seen:
                continue
            if rows[end[0]][end[1]] == "E":
                return depth
            seen.add(end)
            following += [moves + m for m in "UDLR"]
        frontier, depth = following, depth + 1
    raise AssertionError("no way to the exit")


# -- tasks with one answer -------------------------------------------------------------------------------------
ONE_ANSWER = {
    "count_shapes": (
        _count_oracle,
        lambda count: [count, count + 1, max(count - 1, 0), 0, 12, f"0{count}", f" {count} "],
        lambda count, guess: int(str(guess)) == count,
    ),
    "bar_tallest": (
        _tallest_bar,
        lambda letter: [letter, letter.lower(), f"bar {letter}", "A", "B", "G", "AB", "1"],
        lambda letter, guess: guess.removeprefix("bar ").upper() == letter,
    ),
    "bar_value": (
        _asked_bar_value,
        lambda value: [value, value + 1, value - 1, 2 * value, 0],
        lambda value, guess: guess == value,
    ),
    "read_expression": (
        lambda problem: eval(_read_expression(problem)),  # the oracle's own reading: digits and + - * only
        lambda value: [value, value + 1, -value, value * 10, f"+{value}" if value >= 0 else value],
        lambda value, guess: int(guess) == value,
    ),
    "maze_steps": (
        lambda problem: _fewest_moves(_read_maze(problem)),
        lambda steps: [steps, steps + 1, steps - 1, 2 * steps],
        lambda steps, guess: guess == steps,
    ),
}
"""Each task with one right answer: its oracle (the answer it reads from the picture), the near misses of an
answer to judge, and when a guess is right (the oracle's own reading of the text)."""


@ORACLE
@pytest.mark.parametrize("task", list(ONE_ANSWER))
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_one_answer_task_matches_oracle(task, seed, level, data):
    oracle, near_misses, right = ONE_ANSWER[task]
    problem = get_task(task).generate(seed, level)
    answer = oracle(problem)
    assert problem.answer == answer and _correct(problem, answer)
    guess = data.draw(st.sampled_from(near_misses(answer)))
    assert _correct(problem, guess) == right(answer, guess), guess


@ORACLE
@given(seed=SEEDS, level=LEVELS, data=st.data())
def test_maze_moves_matches_oracle(seed, level, data):
    problem = get_task("maze_moves").generate(seed, level)
    rows = _read_maze(problem)
    assert rows == problem.answer["maze"]
    steps = _fewest_moves(rows)
    moves = list(problem.solution)
    edit = data.draw(st.sampled_from(["keep", "detour", "drop", "swap", "random"]))
    if edit == "detour":
        i = data.draw(st.integers(0, len(moves)))
        back = {"U": "D", "D": "U", "L": "R", "R": "L"}
        m = data.draw(st.sampled_from("UDLR"))
        moves[i:i] = [m, back[m]]
    elif edit == "drop":
        moves.pop(data.draw(st.integers(0, len(moves) - 1)))
    elif edit == "swap" and len(moves) > 1:
        i = data.draw(st.integers(0, len(moves) - 2))
        moves[i], moves[i + 1] = moves[i + 1], moves[i]
    elif edit == "random":
        moves = data.draw(st.lists(st.sampled_from("UDLR"), min_size=1, max_size=2 * steps + 2))
    end = _walk(rows, moves)
    reaches = end is not None and rows[end[0]][end[1]] == "E"
    verdict = get_task("maze_moves").verify(problem, f"<answer>{''.join(moves)}</answer>")
    assert verdict.correct == (reaches and len(moves) == steps), moves
    assert (verdict.score > 0) == reaches, moves
