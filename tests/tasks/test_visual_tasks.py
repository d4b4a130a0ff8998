"""What the built-in visual tasks promise besides their answers (those are checked in test_visual_oracles.py):
the same pixels on every run and machine, small pictures that grow with difficulty, and their category and
modalities. The properties every task has (reference scores 1, hostile responses, round trips) are checked for
them with the text tasks in test_tasks_properties.py."""

import json
import subprocess
import sys

import numpy as np
import pytest

from polyrl.tasks import Example, Param, Task, get_task, list_tasks
from polyrl.tasks.base import IMAGE, TEXT_AND_IMAGES
from polyrl.tasks.images import images_digest

VISUAL = [cls.name for cls in list_tasks("visual")]

GOLDEN = {
    "bar_tallest": {"easy": "62787f2e7bb264a7", "hard": "3d86b064d73369bf"},
    "bar_value": {"easy": "0410e5f20d2508ab", "hard": "e69d296dd3b3f168"},
    "count_shapes": {"easy": "9db4f13373f9627f", "hard": "2557706f637a58f0"},
    "jigsaw": {"easy": "ffa5c03b45af2af4", "hard": "baae89cbf54935a2"},
    "maze_moves": {"easy": "f881fe0d1f8e3251", "hard": "cd4401b02461bea2"},
    "maze_steps": {"easy": "2e2dba29dd836edc", "hard": "9ddc70fb6f0f1fc7"},
    "read_expression": {"easy": "ffb181a1d4546e43", "hard": "25f24773a3c0f6c9"},
}
"""Pixel digests of seed 0, train split, as first drawn (2026-12-06): drawing is integer arithmetic on Python's own
random stream, so these hold with any Pillow, NumPy and CPU; a change to them changes every recorded result."""


def test_the_visual_category_holds_the_seven_built_in_visual_tasks():
    assert sorted(VISUAL) == sorted(GOLDEN)


@pytest.mark.parametrize("name", VISUAL)
def test_a_visual_task_shows_images_and_says_so(name):
    task = get_task(name)
    assert task.category == "visual" and task.modalities == TEXT_AND_IMAGES and task.pure
    problem = task.generate(3, "medium")
    assert len(problem.images) == 1 and problem.images[0].mode == "RGB"


@pytest.mark.parametrize("name", VISUAL)
@pytest.mark.parametrize("level", ["easy", "hard"])
def test_pixels_are_those_first_drawn(name, level):
    assert images_digest(get_task(name).generate(0, level).images)[:16] == GOLDEN[name][level]


def test_another_process_draws_the_same_pixels():
    code = (
        "import json; from polyrl.tasks import get_task; from polyrl.tasks.images import images_digest; "
        f"print(json.dumps({{n: images_digest(get_task(n).generate(5, 0.7, 'eval').images) for n in {VISUAL!r}}}))"
    )
    env = {"PYTHONHASHSEED": "12345"}  # another string hash order: nothing may depend on it
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    here = {n: images_digest(get_task(n).generate(5, 0.7, "eval").images) for n in VISUAL}
    assert json.loads(out.stdout) == here


@pytest.mark.parametrize("name", VISUAL)
def test_pictures_are_small_and_grow_with_difficulty(name):
    task = get_task(name)

    def pixels(level):
        return [p.images[0].width * p.images[0].height for p in (task.generate(s, level) for s in range(12))]

    easy, hard = pixels("easy"), pixels("hard")
    assert all(16 * 16 <= n <= 128 * 128 for n in easy + hard)
    assert np.mean(hard) >= np.mean(easy)


@pytest.mark.parametrize("name", ["count_shapes", "read_expression", "jigsaw", "maze_steps"])
def test_noise_and_clutter_grow_with_difficulty(name):
    """Neighbouring pixels differ more at hard: noise, specks and lines are drawn there, not at easy."""

    def roughness(level):
        image = np.asarray(get_task(name).generate(1, level).images[0], dtype=np.int32)
        return np.abs(np.diff(image, axis=1)).mean()

    assert roughness("hard") > roughness("easy")


def test_a_text_task_that_makes_images_is_a_bug_caught_at_generation():
    class Drawn(Task):
        name, category = "drawn_without_saying", "visual"

        def make(self, rng, params):
            return Example("q", 1, "1", images=(np.zeros((4, 4, 3), np.uint8),))

    with pytest.raises(TypeError, match="made a problem with images but its modalities"):
        Drawn().generate(0)


def test_a_task_that_declares_images_carries_them_as_rgb_pil_images():
    class Dots(Task):
        name, category, modalities = "dots", "visual", TEXT_AND_IMAGES
        params = (Param("n", 1, 3),)

        def make(self, rng, params):
            grey = np.full((8, 8), 255, np.uint8)
            grey[0, : params["n"]] = 0
            return Example("how many dots?", params["n"], str(params["n"]), images=(grey,))

    problem = Dots().generate(0, "hard")
    assert IMAGE in Dots.modalities
    assert problem.images[0].mode == "RGB" and problem.images[0].getpixel((2, 0)) == (0, 0, 0)
