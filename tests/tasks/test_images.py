"""A problem's images: one canonical form in memory, lossless round trips, and one line for every bad image."""

import base64
import io
import json
import struct
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image

from polyrl.errors import UserError
from polyrl.eval.heldout import problem_key
from polyrl.tasks import Problem, get_task
from polyrl.tasks.images import (
    MAX_IMAGE_PIXELS,
    data_uri,
    decode_image,
    image_from_record,
    images_digest,
    png_base64,
    png_bytes,
    rgb_image,
)


def _encoded(image, fmt="PNG", **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels, with a few bytes of data (no pixels decoded)."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")


def _problem(images) -> Problem:
    return Problem("count_shapes", "q", "q\nP", 2, "2", 0, "train", 0.0, {}, images=images)


# -- the canonical form ----------------------------------------------------------------------------------------
def test_an_rgb_image_is_kept_as_it_is():
    image = Image.new("RGB", (3, 2), (1, 2, 3))
    assert rgb_image(image, "x") is image


@pytest.mark.parametrize(
    "mode,color,expected",
    [
        ("L", 7, (7, 7, 7)),
        ("1", 1, (255, 255, 255)),
        ("CMYK", (0, 0, 0, 0), (255, 255, 255)),
        ("RGBA", (10, 20, 30, 255), (10, 20, 30)),
        ("RGBA", (10, 20, 30, 0), (255, 255, 255)),  # transparent: the white it is laid over
        ("LA", (0, 128), (127, 127, 127)),  # half transparent black over white
    ],
)
def test_other_modes_become_rgb_with_alpha_laid_over_white(mode, color, expected):
    image = rgb_image(Image.new(mode, (2, 2), color), "x")
    assert image.mode == "RGB" and image.getpixel((0, 0)) == expected and image.info == {}


def test_a_palette_image_with_a_transparent_colour_is_laid_over_white():
    image = Image.new("P", (2, 1))
    image.putpalette([200, 0, 0, 0, 0, 200] + [0] * 762)
    image.putpixel((1, 0), 1)
    image.info["transparency"] = 1
    converted = rgb_image(image, "x")
    assert [converted.getpixel((x, 0)) for x in range(2)] == [(200, 0, 0), (255, 255, 255)]


@pytest.mark.parametrize("mode", ["I;16", "I", "F"])
def test_images_of_more_than_8_bits_a_channel_are_refused(mode):
    with pytest.raises(UserError, match=f"x: image mode {mode} has more than 8 bits a channel"):
        rgb_image(Image.new(mode, (2, 2)), "x")


@pytest.mark.parametrize(
    "array,message",
    [
        (np.zeros((2, 2), np.float32), "must hold uint8 values"),
        (np.zeros((2, 2, 2), np.uint8), "must have shape"),
        (np.zeros((2,), np.uint8), "must have shape"),
        (np.zeros((0, 3, 3), np.uint8), "the image is empty"),
        ([[0, 1]], "must be a PIL image or a numpy array"),
    ],
)
def test_arrays_that_are_no_image_are_refused(array, message):
    with pytest.raises(UserError, match=message):
        rgb_image(array, "x")


@pytest.mark.parametrize("shape,mode", [((2, 3), "L"), ((2, 3, 1), "L"), ((2, 3, 3), "RGB"), ((2, 3, 4), "RGBA")])
def test_uint8_arrays_of_every_image_shape_become_rgb(shape, mode):
    array = np.arange(np.prod(shape), dtype=np.uint8).reshape(shape)
    expected = rgb_image(Image.fromarray(array if shape[-1] != 1 else array[:, :, 0], mode=mode), "x")
    assert rgb_image(array, "x") == expected and expected.size == (3, 2)


# -- decoding --------------------------------------------------------------------------------------------------
def test_png_bytes_round_trip_exactly():
    image = rgb_image(np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8), "x")
    assert decode_image(png_bytes(image), "x") == image
    assert image_from_record(png_base64(image), "x") == image
    assert image_from_record(data_uri(image), "x") == image
    assert image_from_record({"bytes": png_bytes(image), "path": None}, "x") == image


def test_equal_pixels_are_one_image_whatever_the_file_format():
    image = Image.new("RGB", (4, 4), (9, 8, 7))
    bmp = decode_image(_encoded(image, "BMP"), "x")
    tiff = decode_image(_encoded(image, "TIFF"), "x")
    assert bmp == tiff == image and images_digest([bmp]) == images_digest([image])


def test_bytes_that_are_no_image_are_one_line():
    with pytest.raises(UserError, match=r"^row 3: the image does not decode \(cannot identify image file"):
        decode_image(b"not an image at all", "row 3")


def test_a_truncated_png_is_one_line():
    data = _encoded(Image.new("RGB", (64, 64), (1, 2, 3)))
    with pytest.raises(UserError, match="row 3: the image does not decode"):
        decode_image(data[: len(data) // 2], "row 3")


def test_formats_outside_the_list_are_refused():
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    with pytest.raises(UserError, match="does not decode"):
        decode_image(eps, "x")


@pytest.mark.parametrize("side", [4097, 20_000])
def test_a_huge_image_is_refused_from_its_header_without_a_pil_warning(side):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PIL's DecompressionBombWarning (past 89 M pixels) would fail the test
        with pytest.raises(UserError) as caught:
            decode_image(_png_header_only(side, 4096), "row 3")
    assert str(caught.value) == (
        f"row 3: the image is {side}x4096 pixels, over the limit of {MAX_IMAGE_PIXELS:,} (max_image_pixels)"
    )


def test_an_image_past_pils_own_bomb_limit_is_the_same_one_line():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserError) as caught:
            decode_image(_png_header_only(100_000, 4096), "row 3")
    assert str(caught.value) == (
        f"row 3: the image has 409,600,000 pixels, over the limit of {MAX_IMAGE_PIXELS:,} (max_image_pixels)"
    )


def test_a_lower_limit_applies_to_the_header_too():
    data = _encoded(Image.new("RGB", (40, 30)))
    with pytest.raises(UserError, match="40x30 pixels, over the limit of 1,000"):
        decode_image(data, "x", max_pixels=1000)


@pytest.mark.parametrize("text", ["not base64!", "data:image/png,abc", "iVBORw0KGgo"])
def test_text_that_is_not_base64_png_is_one_line(text):
    with pytest.raises(UserError, match=r"^x: "):
        image_from_record(text, "x")


# -- problems --------------------------------------------------------------------------------------------------
def test_a_problem_converts_its_images_when_made():
    problem = _problem([np.zeros((2, 2), np.uint8), Image.new("RGBA", (1, 1), (5, 5, 5, 255))])
    assert [image.mode for image in problem.images] == ["RGB", "RGB"]


def test_a_problem_with_an_image_that_is_not_one_names_the_problem():
    with pytest.raises(UserError, match="problem of task count_shapes image 0: a numpy image must hold uint8"):
        _problem([np.zeros((2, 2), np.float64)])


def test_images_must_be_a_list():
    with pytest.raises(UserError, match="images must be a list, not ndarray"):
        _problem(np.zeros((2, 2, 3), np.uint8))


def test_a_problem_with_images_round_trips_through_json_exactly():
    problem = get_task("count_shapes").generate(4, "hard")
    record = json.loads(json.dumps(problem.to_dict()))
    assert isinstance(record["images"][0], str) and Problem.from_dict(record) == problem


def test_a_problem_differs_from_one_with_other_pixels():
    problem = get_task("count_shapes").generate(4)
    other = Problem.from_dict({**problem.to_dict(), "images": [np.zeros((32, 32, 3), np.uint8)]})
    assert other != problem


def test_a_text_problem_record_has_no_images_key():
    record = get_task("addition").generate(0).to_dict()
    assert "images" not in record and list(record)[-1] == "id"


def test_the_held_out_key_of_a_text_problem_is_what_it_always_was():
    import hashlib

    problem = get_task("addition").generate(3, "medium", "eval")
    before = hashlib.sha256(
        json.dumps([problem.task, problem.prompt, problem.answer], sort_keys=True, default=str).encode()
    ).hexdigest()[:16]
    assert problem_key(problem) == before


def test_the_held_out_key_of_an_image_problem_covers_its_pixels():
    problem = get_task("bar_tallest").generate(0)
    other = Problem.from_dict({**problem.to_dict(), "images": [np.zeros((8, 8, 3), np.uint8)]})
    assert (other.prompt, other.answer) == (problem.prompt, problem.answer)
    assert problem_key(other) != problem_key(problem)


def test_base64_in_a_record_is_png():
    record = get_task("jigsaw").generate(0).to_dict()
    assert base64.b64decode(record["images"][0]).startswith(b"\x89PNG")
