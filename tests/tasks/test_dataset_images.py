"""Dataset tasks with an image column: paths beside the file, bytes, data URIs and ``datasets`` ``Image`` features
become ``Problem.images``; every bad image is one line naming the row, before training starts."""

import base64
import io
import json
import os

import datasets
import numpy as np
import pytest
from PIL import Image

from polyrl.cli import run
from polyrl.errors import UserError
from polyrl.tasks.base import TEXT_AND_IMAGES, TEXT_ONLY
from polyrl.tasks.dataset import DatasetSpec, dataset_task, prompt_hash
from polyrl.tasks.images import images_digest

pytestmark = pytest.mark.usefixtures("forget_new_tasks")


def _grey(level: int, size: int = 6) -> Image.Image:
    return Image.fromarray(np.full((size, size, 3), level, np.uint8))


def _png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def folder(tmp_path):
    """20 rows asking the same question of 20 grey squares (levels 0, 10, …), the images in imgs/."""
    (tmp_path / "imgs").mkdir()
    rows = []
    for i in range(20):
        _grey(10 * i).save(tmp_path / "imgs" / f"{i}.png")
        rows.append({"question": "what grey level?", "answer": str(10 * i), "image": f"imgs/{i}.png"})
    (tmp_path / "grey.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def _task(path, name="grey", **fields):
    return dataset_task(name, DatasetSpec(path=str(path), images="image", eval_fraction=0.3, **fields))


def _level(problem) -> int:
    return problem.images[0].getpixel((0, 0))[0]


def test_image_paths_are_read_relative_to_the_file(folder):
    task = _task(folder / "grey.jsonl")
    for seed in range(10):
        p = task.generate(seed)
        assert _level(p) == int(p.answer) and p.images[0].size == (6, 6)


def test_a_task_with_an_image_column_shows_images_and_one_without_text_only(folder):
    assert _task(folder / "grey.jsonl").modalities == TEXT_AND_IMAGES
    plain = dataset_task("plain", DatasetSpec(path=str(folder / "grey.jsonl"), prompt="image", eval_fraction=0.3))
    assert plain.modalities == TEXT_ONLY and plain.generate(0).images == []


def test_rows_with_one_question_split_by_their_images(folder):
    task = _task(folder / "grey.jsonl")
    splits = task.rows.splits
    assert splits["train"] and splits["eval"]
    with pytest.raises(UserError, match="no training rows are left"):  # by the prompt alone: all on one side
        dataset_task("by_prompt", DatasetSpec(path=str(folder / "grey.jsonl"), eval_fraction=0.3))
    for row in splits["eval"]:
        assert prompt_hash(row.split_key) < 0.3
        assert row.split_key == f"what grey level?\x00{images_digest([_grey(int(row.target))])}"


def test_the_image_column_is_named_in_the_spec(folder):
    rows = [json.loads(line) for line in (folder / "grey.jsonl").read_text().splitlines()]
    renamed = [{"q": r["question"], "a": r["answer"], "picture": r["image"]} for r in rows]
    (folder / "renamed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in renamed))
    spec = DatasetSpec(path=str(folder / "renamed.jsonl"), prompt="q", answer="a", images="picture", eval_fraction=0.3)
    p = dataset_task("renamed", spec).generate(2)
    assert _level(p) == int(p.answer)


def test_a_list_of_images_in_a_cell_gives_several_images(folder):
    rows = [{"question": f"q{i}", "answer": "x", "image": [f"imgs/{i}.png", f"imgs/{i + 1}.png"]} for i in range(10)]
    (folder / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    p = _task(folder / "pairs.jsonl", name="pairs").generate(0)
    i = int(p.question[1:])
    assert [image.getpixel((0, 0))[0] for image in p.images] == [10 * i, 10 * (i + 1)]


def test_data_uris_and_base64_text_are_images_too(folder):
    encoded = base64.b64encode(_png(_grey(77, size=40))).decode()
    rows = [
        {"question": "uri", "answer": "77", "image": "data:image/png;base64," + encoded},
        {"question": "plain", "answer": "77", "image": encoded},
    ] * 5
    rows = [{**r, "question": f"{r['question']} {i}"} for i, r in enumerate(rows)]
    (folder / "inline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = _task(folder / "inline.jsonl", name="inline")
    assert {_level(task.generate(s)) for s in range(6)} == {77}


def test_parquet_bytes_and_datasets_image_features_are_read(folder):
    images = [_grey(10 * i) for i in range(20)]
    table = {"question": [f"q{i}" for i in range(20)], "answer": [str(10 * i) for i in range(20)]}
    datasets.Dataset.from_dict({**table, "image": [_png(x) for x in images]}).to_parquet(folder / "bytes.parquet")
    feature = datasets.Dataset.from_dict({**table, "image": images}, features=None)
    feature = feature.cast_column("image", datasets.Image())
    feature.to_parquet(folder / "feature.parquet")
    feature.save_to_disk(str(folder / "on_disk"))
    for name, path in (("b", folder / "bytes.parquet"), ("f", folder / "feature.parquet"), ("d", folder / "on_disk")):
        p = _task(path, name=name).generate(3)
        assert _level(p) == int(p.answer), name


def test_a_row_without_an_image_shows_none(folder):
    rows = [{"question": f"q{i}", "answer": "1", "image": None if i % 2 else f"imgs/{i}.png"} for i in range(10)]
    (folder / "some.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = _task(folder / "some.jsonl", name="some")
    counts = {len(task.generate(s).images) for s in range(10)}
    assert counts == {0, 1}


def test_problems_of_an_image_dataset_export_and_load_with_their_pixels(folder, tmp_path):
    from polyrl.tasks.io import export_problems, load_problems

    problems = [_task(folder / "grey.jsonl").generate(s) for s in range(5)]
    for suffix in ("jsonl", "parquet"):
        export_problems(tmp_path / f"out.{suffix}", problems)
        assert load_problems(tmp_path / f"out.{suffix}") == problems


# -- failure modes -----------------------------------------------------------------------------------------------
def _broken(folder, image_value, name="broken.jsonl"):
    rows = [
        {"question": "q", "answer": "1", "image": "imgs/0.png"},
        {"question": "r", "answer": "2", "image": image_value},
    ]
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder / name


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("imgs/missing.png", "row 1: column 'image': image file 'imgs/missing.png' does not exist"),
        ("../outside.png", "row 1: column 'image': image path '../outside.png' is outside the dataset's folder"),
        ("/etc/hostname", "row 1: column 'image': image path '/etc/hostname' is outside the dataset's folder"),
        ("imgs/notes.png", r"row 1: column 'image' \(imgs/notes.png\): the image does not decode \(cannot identify"),
        ("imgs/huge.png", r"row 1: column 'image' \(imgs/huge.png\): the image is 5000x4000 pixels, over the limit"),
        ("imgs/deep.png", r"row 1: column 'image' \(imgs/deep.png\): image mode I;16 has more than 8 bits a channel"),
        (42, "row 1: column 'image': holds int, not an image path, image bytes or an image"),
        ("data:image/png,xyz", "row 1: column 'image': an image data URI must be base64"),
    ],
)
def test_a_bad_image_is_one_line_naming_the_row(folder, value, message):
    (folder.parent / "outside.png").write_bytes(_png(_grey(1)))
    (folder / "imgs" / "notes.png").write_text("not an image")
    Image.new("L", (5000, 4000)).save(folder / "imgs" / "huge.png")
    Image.new("I;16", (4, 4)).save(folder / "imgs" / "deep.png")
    with pytest.raises(UserError, match=message) as caught:
        _task(_broken(folder, value), name="broken")
    assert "\n" not in str(caught.value) and "broken.jsonl" in str(caught.value)


def test_a_symbolic_link_out_of_the_folder_is_refused(folder):
    (folder.parent / "secret.png").write_bytes(_png(_grey(1)))
    os.symlink(folder.parent / "secret.png", folder / "imgs" / "link.png")
    with pytest.raises(UserError, match=r"image path 'imgs/link\.png' is outside the dataset's folder"):
        _task(_broken(folder, "imgs/link.png"), name="linked")


def test_a_lower_max_image_pixels_is_applied(folder):
    with pytest.raises(UserError, match="the image is 6x6 pixels, over the limit of 30 \\(max_image_pixels\\)"):
        _task(folder / "grey.jsonl", max_image_pixels=30)


def test_an_image_column_that_is_not_there_lists_the_columns(folder):
    with pytest.raises(UserError, match="has no column 'picture'; its columns: question, answer, image"):
        dataset_task("nocol", DatasetSpec(path=str(folder / "grey.jsonl"), images="picture"))


def test_a_bad_image_reaches_the_command_line_as_one_line_and_exit_code_2(folder, capsys):
    (folder / "imgs" / "notes.png").write_text("not an image")
    entry = {"name": "broken_cli", "dataset": str(_broken(folder, "imgs/notes.png")), "images": "image"}
    config = folder / "config.yaml"
    config.write_text(json.dumps({"tasks": [entry]}))
    assert run(["tasks", "sample", "broken_cli", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("polyrl: error: ") and "does not decode" in err[0], err


def test_an_isolated_verifier_gets_the_problem_without_its_pictures(folder, monkeypatch):
    (folder / "seen_verifier.py").write_text(
        "def check(problem, extracted, target):\n    return float(extracted == target and problem.images == [])\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    task = _task(folder / "grey.jsonl", name="isolated", verifier="seen_verifier:check")
    assert not task.pure
    problem = task.generate(0)
    assert problem.images and task.verify(problem, f"<answer>{problem.answer}</answer>").correct
