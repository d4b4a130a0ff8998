"""The report's samples show the problems' images inline, as PNG data URIs re-encoded from what the run logged; an
entry that is no image is named, never inlined."""

import base64
import io
import json
import re
import subprocess

import yaml
from PIL import Image
from system_packages import chromium_path, needs_chromium

from polyrl.report import build_report
from polyrl.tasks import get_task
from polyrl.tasks.images import png_base64

HOSTILE = 'AAAA" onerror="alert(1)'


def _run_with_image_samples(path):
    """A synthetic run directory (no training): one RL step whose samples carry a visual problem's image, a
    hostile string and a PNG header of 5000x5000 pixels as images."""
    path.mkdir()
    problem = get_task("count_shapes").generate(0, "medium")
    huge = Image.new("L", (5000, 5000))
    buffer = io.BytesIO()
    huge.save(buffer, format="PNG")
    sample = {"task": "count_shapes", "prompt": problem.prompt, "completion": "<answer>2</answer>", "reward": 1.0}
    samples = [
        {**sample, "correct": True, "reason": "correct", "images": [png_base64(problem.images[0])]},
        {
            **sample,
            "correct": False,
            "reason": "wrong",
            "images": [HOSTILE, base64.b64encode(buffer.getvalue()).decode()],
        },
    ]
    (path / "config.yaml").write_text(yaml.safe_dump({"tasks": [{"name": "count_shapes"}], "rl": {"steps": 1}}))
    records = [{"stage": "rl", "step": 1, "reward": 0.5, "samples": samples}]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path, problem


def _problem_images(page: str) -> list[Image.Image]:
    found = re.findall(
        r'<img class="problem" alt="problem image \d+" width="\d+" src="data:image/png;base64,([^"]+)">', page
    )
    return [Image.open(io.BytesIO(base64.b64decode(b))).convert("RGB") for b in found]


def test_a_samples_image_is_shown_with_its_exact_pixels(tmp_path):
    run, problem = _run_with_image_samples(tmp_path / "run")
    page, _ = build_report(run)
    (image,) = _problem_images(page.read_text())
    assert image.tobytes() == problem.images[0].tobytes() and image.size == (64, 64)


def test_an_image_entry_that_is_not_an_image_is_named_not_inlined(tmp_path):
    run, _ = _run_with_image_samples(tmp_path / "run")
    text = build_report(run)[0].read_text()
    assert "onerror" not in text
    assert "image 0: the image text is not base64" in text
    assert "image 1: the image is 5000x5000 pixels, over the limit of 1,048,576" in text


@needs_chromium
def test_the_page_shows_the_image_and_runs_no_script(tmp_path):
    run, _ = _run_with_image_samples(tmp_path / "run")
    page, pngs = build_report(run)
    chromium = chromium_path()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={tmp_path / 'p'}"]
    loaded = subprocess.run(
        [chromium, *flags, "--dump-dom", page.as_uri()], check=True, capture_output=True, text=True, timeout=120
    )
    assert "<script" not in loaded.stdout and "Uncaught" not in loaded.stderr
    assert loaded.stdout.count('<img class="problem"') == 1 and loaded.stdout.count("<img") == len(pngs) + 1


def _run_with_observation_pictures(path):
    """A synthetic run directory whose one sample is an episode whose observations showed two pictures after turn 1
    and one after turn 2, then a malformed entry."""
    path.mkdir()
    shown = [Image.new("RGB", (6 + k, 5), (40 * k, 200, 10)) for k in range(3)]
    observed = [
        {"turn": 1, "images": [png_base64(shown[0]), png_base64(shown[1])]},
        {"turn": 2, "images": [png_base64(shown[2])]},
        {"turn": "x", "images": [png_base64(shown[0])]},
    ]
    sample = {"task": "zoom", "prompt": "look", "completion": "zoom\n[user] zoomed\n", "reward": 1.0, "correct": True}
    (path / "config.yaml").write_text(yaml.safe_dump({"tasks": [{"name": "zoom"}], "rl": {"steps": 1}}))
    record = {"stage": "rl", "step": 1, "reward": 1.0, "samples": [{**sample, "observation_images": observed}]}
    (path / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    return path, shown


def test_an_episodes_observation_pictures_are_shown_below_its_turns_with_their_exact_pixels(tmp_path):
    run, shown = _run_with_observation_pictures(tmp_path / "run")
    page = build_report(run)[0].read_text()
    found = re.findall(
        r'<img class="observation" alt="observation image \d+" width="\d+" src="data:image/png;base64,([^"]+)">', page
    )
    images = [Image.open(io.BytesIO(base64.b64decode(b))).convert("RGB") for b in found]
    assert [im.tobytes() for im in images] == [im.tobytes() for im in shown]
    assert page.index("observation after turn 1:") < page.index("observation after turn 2:")
    assert page.index("zoomed") < page.index("observation after turn 1:")  # below the sample's turns
