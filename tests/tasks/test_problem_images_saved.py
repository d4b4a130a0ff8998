"""Problems with images wherever problems are saved — problem files, `polyrl tasks`, a run's samples, evaluation
records — round-trip with their exact pixels, and text problems are saved as they always were."""

import base64
import json

import datasets
import pytest
from PIL import Image

from polyrl.cli import run
from polyrl.rollout import Trajectory
from polyrl.tasks import Problem, Verdict, get_task
from polyrl.tasks.images import image_from_record
from polyrl.tasks.io import export_problems, load_problems, load_responses, problem_row, write_rows
from polyrl.tasks.leakage import find_leakage
from polyrl.train.metrics import samples

MIX = [("addition", 0), ("count_shapes", 1), ("jigsaw", 2), ("read_expression", 3)]


def _problems():
    return [get_task(name).generate(seed, "hard") for name, seed in MIX]


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_a_mixed_problem_file_round_trips_exactly(tmp_path, suffix):
    problems = _problems()
    export_problems(tmp_path / f"p.{suffix}", problems)
    assert load_problems(tmp_path / f"p.{suffix}") == problems


def test_images_are_base64_png_in_json_lines_and_absent_for_text_problems(tmp_path):
    export_problems(tmp_path / "p.jsonl", _problems())
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert "images" not in rows[0]
    assert all(base64.b64decode(r["images"][0]).startswith(b"\x89PNG") for r in rows[1:])


def test_a_parquet_file_has_an_image_column_datasets_decodes(tmp_path):
    problems = _problems()
    export_problems(tmp_path / "p.parquet", problems)
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "p.parquet"), split="train")
    assert ds[0]["images"] == []
    assert ds[1]["images"][0].convert("RGB").tobytes() == problems[1].images[0].tobytes()


def test_a_file_of_text_problems_is_written_as_before(tmp_path):
    problems = [get_task("addition").generate(s) for s in range(3)]
    export_problems(tmp_path / "p.jsonl", problems)
    expected = "".join(json.dumps(problem_row(p), ensure_ascii=False) + "\n" for p in problems)
    assert (tmp_path / "p.jsonl").read_text() == expected and "images" not in expected
    export_problems(tmp_path / "p.parquet", problems)
    assert "images" not in datasets.load_dataset("parquet", data_files=str(tmp_path / "p.parquet"))["train"].features


def test_a_score_file_with_images_loads(tmp_path):
    problem = get_task("bar_value").generate(0)
    write_rows(tmp_path / "s.parquet", [problem_row(problem, "<answer>3</answer>")])
    ((loaded, response),) = load_responses(tmp_path / "s.parquet")
    assert loaded == problem and response == "<answer>3</answer>"


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_a_problem_file_with_an_image_that_does_not_decode_is_one_line(tmp_path, suffix, capsys):
    row = problem_row(get_task("count_shapes").generate(0))
    row["images"] = [base64.b64encode(b"\x89PNG\r\n\x1a\nbroken").decode()]
    write_rows(tmp_path / f"bad.{suffix}", [row])
    assert run(["tasks", "check-leakage", str(tmp_path / f"bad.{suffix}"), str(tmp_path / f"bad.{suffix}")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    where = f"bad.{suffix}:1" if suffix == "jsonl" else f"bad.{suffix}: row 0"
    assert len(err) == 1 and where in err[0] and "image 0: the image does not decode" in err[0], err


def test_leakage_counts_the_same_question_of_other_pictures_as_no_leak():
    task = get_task("bar_tallest")
    train = [task.generate(s, "hard") for s in range(20)]
    held = [task.generate(s, "hard", "eval") for s in range(20)]
    assert {p.prompt for p in train} == {p.prompt for p in held}  # one question...
    assert find_leakage(train, held).shared_prompts == 0  # ...of other pictures
    assert find_leakage(train, held + train[:2]).shared_prompts == 2


# -- polyrl tasks ----------------------------------------------------------------------------------------------
def test_sample_writes_each_problems_image_beside_the_printed_text(tmp_path, capsys):
    argv = ["tasks", "sample", "maze_steps", "--n", "2", "--seed", "4", "--images", str(tmp_path / "imgs")]
    assert run(argv) == 0
    out = capsys.readouterr().out
    for seed in (4, 5):
        path = tmp_path / "imgs" / f"maze_steps_train_{seed}_0.png"
        assert f"image: {path}" in out
        with Image.open(path) as written:
            assert written.convert("RGB") == get_task("maze_steps").generate(seed).images[0]


def test_sample_without_images_says_what_the_problem_shows(capsys):
    assert run(["tasks", "sample", "jigsaw", "--n", "1"]) == 0
    assert "[1 image, 34x34; polyrl tasks sample --images DIR writes it as PNG]" in capsys.readouterr().out


def test_sample_json_carries_the_images_as_base64(capsys):
    assert run(["tasks", "sample", "count_shapes", "--n", "1", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert Problem.from_dict(record) == get_task("count_shapes").generate(0)


def test_sample_images_into_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert run(["tasks", "sample", "jigsaw", "--images", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"polyrl: error: --images {tmp_path / 'file'}: not a directory"]


def test_export_then_score_keeps_the_pictures(tmp_path, capsys):
    out = tmp_path / "visual.parquet"
    assert run(["tasks", "export", "--tasks", "count_shapes,bar_tallest", "--n", "3", "--out", str(out)]) == 0
    problems = load_problems(out)
    assert all(len(p.images) == 1 for p in problems)
    rows = [problem_row(p, get_task(p.task).reference_response(p)) for p in problems]
    write_rows(tmp_path / "scored.jsonl", rows)
    assert run(["tasks", "score", str(tmp_path / "scored.jsonl")]) == 0
    assert "1.000" in capsys.readouterr().out


# -- a run's samples and evaluation records ---------------------------------------------------------------------
def _trajectory(problem):
    verdict = Verdict(1.0, True, "correct", True, "2")
    return Trajectory(problem.task, 0, problem, [1], [2], "<answer>2</answer>", True, 1.0, {}, verdict)


def test_a_runs_samples_keep_the_problems_images_whole():
    visual, text = get_task("count_shapes").generate(0, "hard"), get_task("addition").generate(0)
    logged = json.loads(json.dumps(samples([_trajectory(visual), _trajectory(text)])))
    assert image_from_record(logged[0]["images"][0], "x") == visual.images[0]
    assert "images" not in logged[1]


def test_a_runs_samples_keep_an_episodes_observation_pictures_whole_in_turn_order():
    visual = get_task("count_shapes").generate(0, "hard")
    crops = [Image.new("RGB", (5, 3), (k, 2 * k, 3 * k)) for k in (10, 20, 30)]
    episode = _trajectory(visual)
    episode.observation_images = [(1, crops[:2]), (3, crops[2:])]
    (logged,) = json.loads(json.dumps(samples([episode])))
    turns = [
        (entry["turn"], [image_from_record(b, "x") for b in entry["images"]]) for entry in logged["observation_images"]
    ]
    assert turns == [(1, crops[:2]), (3, crops[2:])]


def test_a_sample_without_observation_pictures_has_no_observation_images_entry():
    (logged,) = samples([_trajectory(get_task("count_shapes").generate(0, "hard"))])
    assert "observation_images" not in logged


def test_an_evaluation_keeps_the_images_on_the_greedy_sample_of_each_problem(tmp_path):
    from polyrl.eval.runner import run_suite
    from polyrl.eval.sources import Completion
    from polyrl.eval.suite import EvalSuite
    from polyrl.tasks.base import TEXT_AND_IMAGES

    class Answers:
        """A source of a model that takes images and answers 1."""

        description, modalities = "answers 1", TEXT_AND_IMAGES

        def complete(self, requests, on_done):
            for r in requests:
                on_done(r, Completion("<answer>1</answer>", 3, True))

    suite = EvalSuite.model_validate({"name": "v", "samples": 2, "tasks": [{"name": "bar_value", "n": 2}]})
    run_suite(suite, Answers(), tmp_path / "ev", "prompt", "answers 1")
    records = [json.loads(line) for line in (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()]
    with_images = [r for r in records if "images" in r]
    assert len(records) == 6 and len(with_images) == 2 and all(r["greedy"] for r in with_images)
    shown = {image_from_record(r["images"][0], "x").tobytes() for r in with_images}
    problems = [get_task("bar_value").generate(s, "medium", "eval") for s in range(2)]
    assert shown == {p.images[0].tobytes() for p in problems}
