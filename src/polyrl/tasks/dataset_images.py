"""A dataset's image column: what a cell may hold, where an image path may point, and when images are decoded.

A cell holds one image or a list of them (an empty cell, none). Each image is given as

- a path, relative to the dataset file's folder (a ``save_to_disk`` directory: that directory), which must stay
  inside it once symbolic links are resolved; a hub dataset's rows must carry the images themselves;
- bytes (a parquet ``binary`` column), a ``data:image/...;base64,`` URI, or plain base64 text of a PNG or JPEG file
  (an exported problem file's ``images``);
- a ``datasets`` ``Image`` feature, which is read undecoded (its bytes, or its path as above), so that every
  image goes through polyrl's own decoding and limits (:mod:`polyrl.tasks.images`).

Each image is decoded once when the rows load, so a broken, huge or odd one is a one-line error naming the row
before training starts; the rows keep the bytes (or the path) and decode again when a problem is served.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path
from typing import Any

from polyrl.errors import UserError
from polyrl.tasks.images import base64_image, decode_image, image_path, images_digest, png_bytes, rgb_image

ImageRef = bytes | Path
"""An image of a row: its encoded bytes, or the resolved path of its file."""

_BASE64_TEXT = re.compile(r"[A-Za-z0-9+/]{100,}={0,2}")
_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff")


def undecoded_images(table, column: str):
    """``table`` with its ``Image`` feature column (or list of ``Image``) read as ``{"bytes", "path"}`` records."""
    from datasets import Image

    feature = table.features[column]
    if isinstance(feature, Image):
        return table.cast_column(column, Image(decode=False))
    if isinstance(feature, list) and feature and isinstance(feature[0], Image):
        return table.cast_column(column, [Image(decode=False)])
    inner = getattr(feature, "feature", None)
    if isinstance(inner, Image):  # List / Sequence of images
        return table.cast_column(column, type(feature)(Image(decode=False)))
    return table


def row_images(value: Any, root: Path | None, where: str, max_pixels: int) -> tuple[tuple[ImageRef, ...], str | None]:
    """The image references of one cell, each checked by decoding it now, and the digest of their pixels."""
    if value is None:
        return (), None
    values = value if isinstance(value, (list, tuple)) else [value]
    refs, decoded = [], []
    for i, item in enumerate(values):
        at = where if len(values) == 1 else f"{where} image {i}"
        ref = _reference(item, root, at, max_pixels)
        decoded.append(load_image(ref, f"{at} ({item})" if isinstance(ref, Path) else at, max_pixels))
        refs.append(ref)
    return tuple(refs), (images_digest(decoded) if decoded else None)


def load_image(ref: ImageRef, where: str, max_pixels: int):
    """The canonical RGB image of a reference (a file is read again: it is decoded when a problem is served)."""
    if isinstance(ref, Path):
        try:
            data = ref.read_bytes()
        except OSError as exc:
            raise UserError(f"{where}: cannot read image file {str(ref)!r} ({exc.strerror or exc})") from None
        return decode_image(data, where, max_pixels)
    return decode_image(ref, where, max_pixels)


def _reference(item: Any, root: Path | None, where: str, max_pixels: int) -> ImageRef:
    if isinstance(item, dict):  # a datasets Image feature read undecoded
        if item.get("bytes") is not None:
            return bytes(item["bytes"])
        item = item.get("path")
        if item is None:
            raise UserError(f"{where}: the image record holds neither bytes nor a path")
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, str):
        embedded = _embedded(item, where)
        if embedded is not None:
            return embedded
        if root is None:
            raise UserError(
                f"{where}: image path {item!r} in a hub dataset; image paths are read relative to a local dataset "
                "file, so give the images themselves (an Image feature or bytes)"
            )
        return image_path(item, root, where)
    from PIL import Image

    if isinstance(item, Image.Image):
        return png_bytes(rgb_image(item, where, max_pixels))
    raise UserError(f"{where}: holds {type(item).__name__}, not an image path, image bytes or an image")


def _embedded(text: str, where: str) -> bytes | None:
    """The bytes of a ``data:`` URI, or of plain base64 text of a PNG or JPEG file; None for a path."""
    if text.startswith("data:"):
        return base64_image(text, where)
    if _BASE64_TEXT.fullmatch(text):
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return None
        if data.startswith(_SIGNATURES):
            return data
    return None
