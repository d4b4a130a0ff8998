"""Visual tasks read from a picture: counting shapes, reading a bar chart, reading a written expression.

Each problem carries one small RGB image (:mod:`polyrl.tasks.builtin._draw`: integer drawing, the same pixels on
every machine) and a question about it; the answer is checked by rule, from the answer stored when the picture was
drawn, never from the pixels. Difficulty moves the picture's size, how many things it shows, the distractors and
clutter, and the noise on every pixel. The jigsaw and the drawn mazes are in ``visual_puzzles``.
"""

from __future__ import annotations

import re

from polyrl.tasks.base import TEXT_AND_IMAGES, Example, Param, Problem, Task
from polyrl.tasks.builtin._draw import WHITE, Canvas, free_spot, speckles, text_width
from polyrl.tasks.builtin._parse import evaluate_expression, parse_int
from polyrl.tasks.task_registry import register_task

SHAPE_COLORS = {"red": (220, 40, 40), "green": (40, 160, 60), "blue": (40, 80, 220), "yellow": (230, 200, 40)}
"""The shapes' colours, each at least 116 apart (RGB distance) from any other colour a picture uses."""
SPECK = (128, 128, 128)
SHAPE_KINDS = ("circle", "square", "triangle")
GRID = (170, 170, 170)
BAR = (40, 80, 220)
CLUTTER = (180, 180, 180)


class VisualTask(Task):
    """A built-in task whose problems are pictures: category ``visual``, images in its modalities, pure checks."""

    category = "visual"
    modalities = TEXT_AND_IMAGES
    pure = True


@register_task("count_shapes")
class CountShapes(VisualTask):
    description = "Count the shapes of one colour and kind (circles, squares, triangles) in a picture."
    params = (
        Param("size", 32, 96, "picture side in pixels"),
        Param("shapes", 3, 12, "most shapes drawn"),
        Param("colors", 1, 4, "colours in use"),
        Param("kinds", 1, 3, "kinds of shape in use"),
        Param("clutter", 0, 40, "grey specks drawn behind the shapes"),
        Param("noise", 0, 30, "largest change of a colour channel by pixel noise"),
    )
    answer_shape = "a single integer"

    def make(self, rng, p):
        n = p["size"]
        colors = rng.sample(sorted(SHAPE_COLORS), p["colors"])
        kinds = rng.sample(SHAPE_KINDS, p["kinds"])
        target = (colors[0], kinds[0])
        others = [(c, k) for c in colors for k in kinds if (c, k) != target]
        total = rng.randint(1, p["shapes"])
        wanted = total if not others else rng.randint(0, total)
        looks = [target] * wanted + [rng.choice(others) for _ in range(total - wanted)]
        canvas = Canvas(n, n)
        speckles(canvas, rng, p["clutter"], SPECK)
        taken: list[tuple[int, int, int]] = []
        count = 0
        for color, kind in looks:
            size = rng.randint(6, max(6, min(12, n // 4)))
            spot = free_spot(rng, taken, size, n, n, gap=2)
            if spot is None:  # a crowded picture: this shape is left out, and not counted
                continue
            taken.append((*spot, size))
            canvas.shape(kind, *spot, size, SHAPE_COLORS[color])
            count += (color, kind) == target
        canvas.noise(rng, p["noise"])
        name = f"{target[0]} {target[1]}s"
        statement = (
            "The picture shows coloured shapes (circles, squares and triangles) on a white background, with grey "
            f"specks and pixel noise as clutter. How many {name} are there?\n"
            f"Answer with a single integer: the number of {name} in the picture."
        )
        return Example(f"how many {name}?", count, str(count), statement, images=(canvas.image(),))

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)


# -- bar charts ---------------------------------------------------------------------------------------------
BAR_UNIT, BAR_WIDTH, BAR_GAP = 4, 6, 4
"""Pixels per unit of value (the grid's spacing), per bar, between bars."""
BAR_LETTERS = "ABCDEFG"


def bar_chart(values: list[int], top: int, rng, noise: int):
    """A bar chart of ``values`` (bars labelled A, B, … left to right) on a grid of ``top`` units: a horizontal
    grey line at every unit above the black baseline, a black axis on the left."""
    baseline = 3 + top * BAR_UNIT
    width = 5 + len(values) * (BAR_WIDTH + BAR_GAP)
    canvas = Canvas(width, baseline + 10)
    for unit in range(1, top + 1):
        canvas.rect(4, baseline - unit * BAR_UNIT, width - 5, 1, GRID)
    canvas.rect(3, 3, 1, baseline - 2, (20, 20, 20))
    canvas.rect(3, baseline, width - 4, 1, (20, 20, 20))
    for i, value in enumerate(values):
        x = 6 + i * (BAR_WIDTH + BAR_GAP)
        canvas.rect(x, baseline - value * BAR_UNIT, BAR_WIDTH, value * BAR_UNIT, BAR)
        canvas.text(x + (BAR_WIDTH - 3) // 2, baseline + 3, BAR_LETTERS[i])
    canvas.noise(rng, noise)
    return canvas.image()


def _chart_words(bars: int) -> str:
    return (
        f"The picture is a bar chart of {bars} bars, labelled A to {BAR_LETTERS[bars - 1]} under them from left to "
        "right. Grey grid lines run one unit apart above the black bottom line, which is 0."
    )


@register_task("bar_tallest")
class BarTallest(VisualTask):
    description = "Name the tallest bar of a bar chart by its letter."
    params = (
        Param("bars", 2, 7, "most bars"),
        Param("top", 4, 12, "grid lines (the largest possible value)"),
        Param("lead", 3, 1, "units the tallest bar stands above the next"),
        Param("noise", 0, 30, "largest change of a colour channel by pixel noise"),
    )
    answer_shape = "a single letter"

    def make(self, rng, p):
        bars, lead = rng.randint(2, p["bars"]), p["lead"]
        tallest = rng.randint(1 + lead, p["top"])
        values = [rng.randint(1, tallest - lead) for _ in range(bars)]
        winner = rng.randrange(bars)
        values[winner] = tallest
        letter = BAR_LETTERS[winner]
        statement = f"{_chart_words(bars)} Which bar is the tallest?\nAnswer with a single letter: the label of the tallest bar."
        image = bar_chart(values, p["top"], rng, p["noise"])
        return Example("tallest bar?", letter, letter, statement, images=(image,))

    def check(self, answer: str, problem: Problem):
        match = re.fullmatch(r"\s*(?:bar\s+)?([A-Za-z])\s*\.?\s*", answer, flags=re.IGNORECASE)
        if match is None:
            raise ValueError("not a bar's letter")
        return float(match.group(1).upper() == problem.answer)


@register_task("bar_value")
class BarValue(VisualTask):
    description = "Read the value of one bar of a bar chart off its grid."
    params = (
        Param("bars", 2, 7, "most bars"),
        Param("top", 4, 12, "grid lines (the largest possible value)"),
        Param("noise", 0, 30, "largest change of a colour channel by pixel noise"),
    )
    answer_shape = "a single integer"

    def make(self, rng, p):
        bars = rng.randint(2, p["bars"])
        values = [rng.randint(1, p["top"]) for _ in range(bars)]
        asked = rng.randrange(bars)
        letter, value = BAR_LETTERS[asked], values[asked]
        statement = (
            f"{_chart_words(bars)} What is the value of bar {letter}: how many grid units high is it?\n"
            f"Answer with a single integer: the value of bar {letter}."
        )
        image = bar_chart(values, p["top"], rng, p["noise"])
        return Example(f"value of bar {letter}?", value, str(value), statement, images=(image,))

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)


# -- a written expression -----------------------------------------------------------------------------------
EXPRESSION_SCALE = 2
"""Each font pixel of the expression is a 2x2 block: glyphs of 6x10 pixels."""


@register_task("read_expression")
class ReadExpression(VisualTask):
    description = "Read an arithmetic expression drawn in a picture (+, -, times) and give its value."
    params = (
        Param("terms", 2, 4, "numbers in the expression"),
        Param("digits", 1, 2, "most digits of a number"),
        Param("times_share", 0.0, 0.4, "chance that an operator is a multiplication", integer=False),
        Param("jitter", 0, 3, "most pixels a character is moved up or down"),
        Param("clutter", 0, 6, "light grey lines drawn behind the expression"),
        Param("noise", 0, 30, "largest change of a colour channel by pixel noise"),
    )
    answer_shape = "a single integer"

    def make(self, rng, p):
        text = str(rng.randint(0, 10 ** rng.randint(1, p["digits"]) - 1))
        for _ in range(p["terms"] - 1):
            op = "*" if rng.random() < p["times_share"] else rng.choice("+-")
            text += op + str(rng.randint(0, 10 ** rng.randint(1, p["digits"]) - 1))
        value = int(evaluate_expression(text)[0])
        jitter, scale = p["jitter"], EXPRESSION_SCALE
        canvas = Canvas(8 + text_width(text, scale), 8 + 5 * scale + 2 * jitter, WHITE)
        for _ in range(p["clutter"]):
            ends = [rng.randrange(canvas.width), rng.randrange(canvas.height)]
            canvas.line(*ends, rng.randrange(canvas.width), rng.randrange(canvas.height), CLUTTER)
        offsets = [jitter + rng.randint(-jitter, jitter) for _ in text]
        canvas.text(4, 4, text, scale=scale, offsets=offsets)
        canvas.noise(rng, p["noise"])
        statement = (
            "The picture shows an arithmetic expression of whole numbers written in digits, with + (plus), - (minus) "
            "and a cross x (times) between them. Multiplication comes before addition and subtraction, which go left "
            "to right. What is the value of the expression?\n"
            "Answer with a single integer (it may be negative): the value of the expression."
        )
        return Example("value of the expression?", value, str(value), statement, images=(canvas.image(),))

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) == problem.answer)
