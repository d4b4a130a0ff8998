"""docs/vision.md is true: its task class runs as written, and its pictures and answers are what the stated command
writes today."""

import re
from pathlib import Path

import pytest
from PIL import Image

from polyrl.errors import UserError
from polyrl.tasks import TEXT_ONLY, check_modalities, get_task

DOC = Path(__file__).parents[2] / "docs" / "vision.md"

pytestmark = pytest.mark.usefixtures("forget_new_tasks")


def _code_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_documented_visual_task_runs_as_written():
    namespace = {"__name__": "docs_vision_example"}
    exec(_code_blocks()[0], namespace)
    task = get_task("dot_side")
    for seed in range(20):
        problem = task.generate(seed, "hard")
        assert problem.images[0].size == (64, 64) and problem.images[0].mode == "RGB"
        pixels = problem.images[0].load()
        dark = [x for x in range(64) for y in range(64) if pixels[x, y] == (0, 0, 0)]
        assert (sum(dark) / len(dark) < 32) == (problem.answer == "left")
        assert task.verify(problem, task.reference_response(problem)).correct
    assert get_task("dot_side").generate(3) == task.generate(3)
    with pytest.raises(UserError, match="task dot_side has images; model tiny takes text only"):
        check_modalities({"dot_side": task}, TEXT_ONLY, "tiny")


def test_the_usage_block_runs():
    exec(_code_blocks()[0], {"__name__": "docs_vision_example"})
    namespace: dict = {}
    exec(_code_blocks()[1], namespace)
    assert namespace["problem"].to_dict()["images"][0].startswith("iVBORw0KGgo")


def test_the_tiny_vision_language_model_example_runs():
    namespace: dict = {}
    exec(_code_blocks()[2], namespace)
    ids, policy = namespace["ids"], namespace["policy"]
    assert tuple(ids.pixels.shape) == (1, 32, 32, 3)
    assert ids.count(policy.model.config.image_token_id) == 16 and len(policy.modalities) == 2


@pytest.mark.parametrize(
    "row", [line for line in DOC.read_text().splitlines() if line.startswith("| `") and "img/visual/" in line]
)
def test_each_picture_and_answer_in_the_table_is_what_the_command_writes(row):
    cells = [c.strip() for c in row.strip("|").split("|")]
    name, picture, question, answer = cells[0].strip("`"), cells[1], cells[2].strip("`"), cells[3].strip("`")
    path = DOC.parent / re.search(r"\((img/visual/[^)]+)\)", picture).group(1)
    problem = get_task(name).generate(0, "medium")
    with Image.open(path) as written:
        assert written.convert("RGB") == problem.images[0]
    assert problem.question == question and problem.solution == answer
