"""The images a problem may carry: one canonical form in memory, one lossless form on disk, one set of limits.

In memory a problem's image is a plain ``PIL.Image.Image`` in mode ``RGB`` with no metadata, whatever it was made
from (:func:`rgb_image`): a PIL image of another mode, or a ``uint8`` numpy array of shape ``(H, W)``,
``(H, W, 1)``, ``(H, W, 3)`` or ``(H, W, 4)``. Two images are equal when their pixels are (PIL's ``==``), so
problems compare, hash (:func:`images_digest`) and round-trip by pixels, never by how a file encoded them.

Modes: ``1``, ``L``, ``P``, ``CMYK``, ``YCbCr``, ``HSV``, ``RGBX`` are converted to RGB; modes with an alpha channel
(``RGBA``, ``LA``, ``PA``, ``La``, ``RGBa``, a ``P`` image with a transparent colour) are laid over white, then
RGB. Modes with more than 8 bits a channel (``I;16`` and its kin, ``I``, ``F``) and any other mode are refused:
narrowing them to 8 bits needs a choice (which range becomes black and white) that polyrl will not guess.

On disk an image is PNG bytes (:func:`png_bytes`): base64 text in JSON and JSON lines, an image column in parquet.
Decoding (:func:`decode_image`) reads PNG, JPEG, GIF, BMP, TIFF and WebP only (the first frame of an animation),
refuses an image of more than :data:`MAX_IMAGE_PIXELS` pixels from its header, before any pixel is decoded, and
turns every failure into one :class:`~polyrl.errors.UserError` line, never a PIL warning or traceback.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from polyrl.errors import UserError

MAX_IMAGE_PIXELS = 4096 * 4096
"""The most pixels (width × height) an image may have: 16,777,216, 48 MiB as RGB. PIL's own decompression-bomb
limit (89.5 M pixels, a warning, an error at twice that) is never reached: polyrl refuses first, in one line."""

DECODED_FORMATS = ("PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP")
"""The file formats an image may be read from; PIL's others (EPS, which runs Ghostscript, among them) are refused."""

_CONVERTED = {"1", "L", "P", "RGB", "CMYK", "YCbCr", "HSV", "RGBX"}
_WITH_ALPHA = {"RGBA", "LA", "PA", "La", "RGBa"}
_WIDE = {"I", "F", "I;16", "I;16L", "I;16B", "I;16N", "I;16S", "I;32", "I;32L", "I;32B", "I;32S"}
_WHITE = (255, 255, 255)


def _image_module():
    from PIL import Image

    return Image


def rgb_image(value: Any, where: str, max_pixels: int = MAX_IMAGE_PIXELS):
    """``value`` (a PIL image or a uint8 numpy array) as the canonical RGB image; anything else, an odd mode, an
    empty or a too large image is a one-line UserError naming ``where``."""
    Image = _image_module()
    if not isinstance(value, Image.Image):
        value = _from_array(value, where)
    width, height = value.size
    _check_size(width, height, where, max_pixels)
    if value.mode == "RGB" and type(value) is Image.Image and not value.info:
        return value  # already canonical: kept as it is, not copied
    return _to_rgb(value, where)


def _from_array(value: Any, where: str):
    import numpy as np

    Image = _image_module()
    if not isinstance(value, np.ndarray):
        raise UserError(f"{where}: an image must be a PIL image or a numpy array, not {type(value).__name__}")
    if value.dtype != np.uint8:
        raise UserError(f"{where}: a numpy image must hold uint8 values (0-255), not {value.dtype}")
    if value.ndim == 3 and value.shape[2] == 1:
        value = value[:, :, 0]
    if not (value.ndim == 2 or (value.ndim == 3 and value.shape[2] in (3, 4))):
        raise UserError(
            f"{where}: a numpy image must have shape (H, W), (H, W, 1), (H, W, 3) or (H, W, 4), not {value.shape}"
        )
    _check_size(value.shape[1], value.shape[0], where, MAX_IMAGE_PIXELS)
    return Image.fromarray(np.ascontiguousarray(value))  # L, RGB or RGBA by its shape


def _check_size(width: int, height: int, where: str, max_pixels: int) -> None:
    if width < 1 or height < 1:
        raise UserError(f"{where}: the image is empty ({width}x{height} pixels)")
    if width * height > max_pixels:
        raise UserError(
            f"{where}: the image is {width}x{height} pixels, over the limit of {max_pixels:,} (max_image_pixels)"
        )


def _to_rgb(image, where: str):
    Image = _image_module()
    mode = image.mode
    if mode == "P" and "transparency" in image.info:
        mode = "PA"
    if mode in _WITH_ALPHA:
        rgba = image.convert("RGBA")
        out = Image.new("RGBA", rgba.size, (*_WHITE, 255))
        out.alpha_composite(rgba)
        out = out.convert("RGB")
    elif mode in _CONVERTED:
        out = image.convert("RGB")
    elif mode in _WIDE:
        raise UserError(
            f"{where}: image mode {mode} has more than 8 bits a channel; save the image as 8-bit RGB (or L) first"
        )
    else:
        raise UserError(f"{where}: image mode {mode} is not supported; save the image as 8-bit RGB first")
    if type(out) is not Image.Image:
        out = out.copy()
    out.info = {}
    return out


def problem_images(values: list[Any] | tuple[Any, ...], where: str) -> list:
    """The canonical RGB images of ``values``: images, arrays, or their serialised forms (:func:`image_from_record`)."""
    if not isinstance(values, (list, tuple)):
        raise UserError(f"{where}: images must be a list, not {type(values).__name__}")
    return [image_from_record(v, f"{where} image {i}") for i, v in enumerate(values)]


def image_from_record(value: Any, where: str, max_pixels: int = MAX_IMAGE_PIXELS):
    """One image from any form polyrl writes or reads: a PIL image or numpy array; PNG (or other) bytes; base64 text
    of them, with or without a ``data:image/...;base64,`` prefix; a ``{"bytes": ...}`` record (a parquet image
    column, a ``datasets`` ``Image`` feature left undecoded)."""
    if isinstance(value, dict):
        data = value.get("bytes")
        if data is None:
            raise UserError(f"{where}: the image record holds no bytes")
        value = data
    if isinstance(value, str):
        value = base64_image(value, where)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return decode_image(bytes(value), where, max_pixels)
    return rgb_image(value, where, max_pixels)


def base64_image(text: str, where: str) -> bytes:
    """The bytes in base64 text, with or without a ``data:image/...;base64,`` prefix; anything else a UserError."""
    if text.startswith("data:"):
        header, comma, text = text.partition(",")
        if not comma or not header.endswith(";base64"):
            raise UserError(f"{where}: an image data URI must be base64 (data:image/png;base64,...)")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise UserError(f"{where}: the image text is not base64 (of PNG bytes)") from None


def decode_image(data: bytes, where: str, max_pixels: int = MAX_IMAGE_PIXELS):
    """The canonical RGB image encoded in ``data``. An unknown format, a broken file, a header over ``max_pixels``
    or an odd mode is one UserError line; PIL's decompression-bomb warning never reaches the user."""
    Image = _image_module()
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data), formats=DECODED_FORMATS)
            _check_size(image.width, image.height, where, max_pixels)
            image.seek(0)
            image.load()
        except UserError:
            raise
        except (Image.DecompressionBombWarning, Image.DecompressionBombError) as exc:
            # PIL's own check, in Image.open, comes before ours for headers past its limit: its message has the size
            size = re.search(r"\((\d+) pixels\)", str(exc))
            pixels = f"{int(size.group(1)):,} pixels" if size else "more pixels than PIL's limit"
            raise UserError(
                f"{where}: the image has {pixels}, over the limit of {max_pixels:,} (max_image_pixels)"
            ) from None
        except Exception as exc:  # PIL raises many types for broken files: all mean "does not decode"
            reason = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
            raise UserError(f"{where}: the image does not decode ({reason})") from None
    return _to_rgb(image, where)


def image_path(value: str | os.PathLike, root: Path, where: str) -> Path:
    """The file of image path ``value`` (relative to ``root``, the dataset's folder), resolved: a path that leaves
    ``root`` once symbolic links are resolved, or that names no file, is a UserError."""
    root = root.resolve()
    path = (root / value).resolve()
    if not path.is_relative_to(root):
        raise UserError(f"{where}: image path {str(value)!r} is outside the dataset's folder {root}")
    if not path.is_file():
        raise UserError(f"{where}: image file {str(value)!r} does not exist (looked for {path})")
    return path


def png_bytes(image) -> bytes:
    """The lossless PNG encoding of a canonical image (what files and samples store)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def encoded_image(value: Any) -> bytes:
    """The file bytes of an image as a problem record holds it: base64 text decoded, bytes as they are, an image
    encoded as PNG."""
    if isinstance(value, str):
        return base64_image(value, "problem image")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return png_bytes(rgb_image(value, "problem image"))


def png_base64(image) -> str:
    """The PNG of ``image`` as base64 text (an image in JSON and JSON lines)."""
    return base64.b64encode(png_bytes(image)).decode("ascii")


def data_uri(image) -> str:
    """``data:image/png;base64,...``: the image inline in an HTML page."""
    return "data:image/png;base64," + png_base64(image)


def images_digest(images: Sequence[Any]) -> str:
    """SHA-256 over the images' pixels (mode, size, bytes): equal for equal pixels however they were stored."""
    digest = hashlib.sha256()
    for image in images:
        digest.update(f"{image.mode}|{image.width}x{image.height}|".encode())
        digest.update(image.tobytes())
    return digest.hexdigest()


def describe_images(images: Sequence[Any]) -> str:
    """``1 image, 64x64`` / ``2 images, 64x64 and 32x48``: a line for text output."""
    sizes = [f"{image.width}x{image.height}" for image in images]
    listed = sizes[0] if len(sizes) == 1 else ", ".join(sizes[:-1]) + " and " + sizes[-1]
    return f"{len(images)} image{'s' if len(images) != 1 else ''}, {listed}"
