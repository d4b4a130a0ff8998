"""Drawing for the visual tasks: a numpy canvas with integer-only shapes, a 3x5 bitmap font and seeded noise.

Every pixel is decided by integer arithmetic on the problem's own random stream (Python's ``random.Random``), never
by a rasteriser, a font file or a float kernel, so the same seed gives the same pixels with any Pillow, NumPy or
CPU. PIL only wraps the finished array (``Image.fromarray``).
"""

from __future__ import annotations

import numpy as np

WHITE = (255, 255, 255)
INK = (20, 20, 20)

FONT = {
    "0": ("###", "#.#", "#.#", "#.#", "###"),
    "1": (".#.", "##.", ".#.", ".#.", "###"),
    "2": ("###", "..#", "###", "#..", "###"),
    "3": ("###", "..#", ".##", "..#", "###"),
    "4": ("#.#", "#.#", "###", "..#", "..#"),
    "5": ("###", "#..", "###", "..#", "###"),
    "6": ("###", "#..", "###", "#.#", "###"),
    "7": ("###", "..#", "..#", ".#.", ".#."),
    "8": ("###", "#.#", "###", "#.#", "###"),
    "9": ("###", "#.#", "###", "..#", "###"),
    "+": ("...", ".#.", "###", ".#.", "..."),
    "-": ("...", "...", "###", "...", "..."),
    "*": ("...", "#.#", ".#.", "#.#", "..."),
    "A": (".#.", "#.#", "###", "#.#", "#.#"),
    "B": ("##.", "#.#", "##.", "#.#", "##."),
    "C": (".##", "#..", "#..", "#..", ".##"),
    "D": ("##.", "#.#", "#.#", "#.#", "##."),
    "E": ("###", "#..", "##.", "#..", "###"),
    "F": ("###", "#..", "##.", "#..", "#.."),
    "G": (".##", "#..", "#.#", "#.#", ".##"),
}
"""3 columns x 5 rows per character; ``*`` is drawn as a times cross."""
GLYPH_WIDTH, GLYPH_HEIGHT = 3, 5


def text_width(text: str, scale: int = 1) -> int:
    """Pixels ``text`` takes at ``scale``: glyphs of 3 columns, one blank column between them."""
    return scale * (GLYPH_WIDTH * len(text) + max(len(text) - 1, 0))


class Canvas:
    """An RGB image under construction: ``pixels[y, x]`` holds the colour at column x, row y."""

    def __init__(self, width: int, height: int, color: tuple[int, int, int] = WHITE):
        self.pixels = np.empty((height, width, 3), dtype=np.uint8)
        self.pixels[:, :] = color

    @property
    def width(self) -> int:
        return self.pixels.shape[1]

    @property
    def height(self) -> int:
        return self.pixels.shape[0]

    def rect(self, x: int, y: int, width: int, height: int, color) -> None:
        """Fill columns ``x … x+width-1`` of rows ``y … y+height-1`` (clipped to the canvas)."""
        x0, y0 = max(x, 0), max(y, 0)
        x1, y1 = min(x + width, self.width), min(y + height, self.height)
        if x0 < x1 and y0 < y1:
            self.pixels[y0:y1, x0:x1] = color

    def shape(self, kind: str, x: int, y: int, size: int, color) -> None:
        """A ``circle``, ``square`` or ``triangle`` (pointing up) filling the ``size`` x ``size`` box at (x, y). Each
        touches all four sides of its box; of the box's corners a square fills 4, a triangle the bottom 2, a
        circle none (for size >= 4)."""
        d = 2 * np.arange(size) - (size - 1)  # doubled offsets from the box's centre line
        if kind == "square":
            mask = np.ones((size, size), dtype=bool)
        elif kind == "circle":
            mask = d[:, None] ** 2 + d[None, :] ** 2 <= size * size
        elif kind == "triangle":  # row r spans |2c - (size-1)| <= 1 + (size-2) r / (size-1)
            rows = np.arange(size)[:, None]
            mask = np.abs(d)[None, :] * (size - 1) <= (size - 1) + (size - 2) * rows
        else:
            raise ValueError(f"unknown shape {kind!r}")
        self.pixels[y : y + size, x : x + size][mask] = color

    def text(self, x: int, y: int, text: str, color=INK, scale: int = 1, offsets: list[int] | None = None) -> None:
        """``text`` in the 3x5 font, each font pixel a ``scale`` x ``scale`` block, glyph i moved down by
        ``offsets[i]`` rows."""
        for i, ch in enumerate(text):
            gx, gy = x + i * scale * (GLYPH_WIDTH + 1), y + (offsets[i] if offsets else 0)
            for r, row in enumerate(FONT[ch]):
                for c, cell in enumerate(row):
                    if cell == "#":
                        self.rect(gx + c * scale, gy + r * scale, scale, scale, color)

    def line(self, x0: int, y0: int, x1: int, y1: int, color) -> None:
        """A one-pixel line from (x0, y0) to (x1, y1), both ends included (Bresenham)."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            if 0 <= x0 < self.width and 0 <= y0 < self.height:
                self.pixels[y0, x0] = color
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err, x0 = err + dy, x0 + sx
            if e2 <= dx:
                err, y0 = err + dx, y0 + sy

    def noise(self, rng, amplitude: int) -> None:
        """Add to every channel of every pixel an integer in [-amplitude, amplitude] (then clip to 0-255), drawn
        from ``rng``'s bits."""
        if amplitude <= 0:
            return
        n = self.pixels.size
        raw = np.frombuffer(rng.getrandbits(8 * n).to_bytes(n, "little"), dtype=np.uint8).astype(np.int32)
        offsets = (raw * (2 * amplitude + 1) >> 8) - amplitude
        noisy = self.pixels.astype(np.int32) + offsets.reshape(self.pixels.shape)
        self.pixels = np.clip(noisy, 0, 255).astype(np.uint8)

    def image(self):
        """The canvas as an RGB PIL image."""
        from PIL import Image

        return Image.fromarray(self.pixels, mode="RGB")


def free_spot(rng, taken: list[tuple[int, int, int]], size: int, width: int, height: int, gap: int, tries: int = 200):
    """``(x, y)`` of a ``size`` box inside the canvas, at least ``gap`` pixels from every box in ``taken`` (``(x, y,
    size)``), or None after ``tries`` random draws."""
    for _ in range(tries):
        x, y = rng.randint(1, width - size - 1), rng.randint(1, height - size - 1)
        if all(
            x >= tx + ts + gap or tx >= x + size + gap or y >= ty + ts + gap or ty >= y + size + gap
            for tx, ty, ts in taken
        ):
            return x, y
    return None


def speckles(canvas: Canvas, rng, count: int, color) -> None:
    """``count`` 1x1 or 2x2 specks of ``color`` at random places (clutter, drawn before the content)."""
    for _ in range(count):
        side = rng.randint(1, 2)
        canvas.rect(rng.randrange(canvas.width), rng.randrange(canvas.height), side, side, color)
