"""Dataset tasks: rows of a file as Problems, deterministic splits and seeds, difficulty buckets, verifiers,
and one-line errors for bad input."""

import json
import re
import textwrap

import pytest

from polyrl.cli import run
from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.tasks import get_task
from polyrl.tasks.dataset import DatasetSpec, bucket_bounds, dataset_task, prompt_hash
from polyrl.tasks.io import export_problems, load_problems
from polyrl.tasks.leakage import find_leakage
from polyrl.tasks.verifiers import DATASET_VERIFIERS
from polyrl.train.config import TaskSpec

# dataset tasks a test registers leave the process-wide task registry when it ends
pytestmark = pytest.mark.usefixtures("forget_new_tasks")


def gsm8k_rows(n: int, start: int = 0) -> list[dict]:
    """GSM8K's format: the answer is worked reasoning, then '#### <number>'."""
    return [
        {
            "question": f"Tom has {i} apples and buys {i + 3} more. How many apples does he have?",
            "answer": f"He has {i} + {i + 3} = <<{i}+{i + 3}={2 * i + 3}>>{2 * i + 3} apples.\n#### {2 * i + 3}",
            "level": i % 3 + 1,
        }
        for i in range(start, start + n)
    ]


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def gsm8k(tmp_path):
    return write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(40))


def spec(path, **fields) -> DatasetSpec:
    return DatasetSpec(path=path, answer_after="####", verifier="numeric", **fields)


def test_gsm8k_rows_become_problems_with_the_number_after_the_marker(gsm8k):
    task = dataset_task("test_gsm8k", spec(gsm8k))
    p = task.generate(0, split="train")
    i = p.params["row"]
    assert p.question == gsm8k_rows(40)[i]["question"]
    assert p.answer == p.solution == str(2 * i + 3)
    assert p.prompt == p.question + "\nGive your final answer inside <answer></answer> tags."
    assert task.verify(p, task.reference_response(p)).correct


def test_the_eval_split_is_the_rows_whose_prompt_hash_falls_below_eval_fraction(gsm8k):
    task = dataset_task("test_gsm8k", spec(gsm8k, eval_fraction=0.25))
    expected = {i for i, r in enumerate(gsm8k_rows(40)) if prompt_hash(r["question"]) < 0.25}
    assert {r.index for r in task.rows.splits["eval"]} == expected
    assert len(task.rows.splits["train"]) + len(expected) == 40


def test_adding_rows_never_moves_a_row_to_the_other_split(tmp_path, gsm8k):
    small = dataset_task("test_small", spec(gsm8k, eval_fraction=0.3))
    bigger = write_jsonl(tmp_path / "more.jsonl", gsm8k_rows(40) + gsm8k_rows(40, start=40))
    big = dataset_task("test_big", spec(bigger, eval_fraction=0.3))
    for split in ("train", "eval"):
        questions = {r.question for r in small.rows.splits[split]}
        assert questions <= {r.question for r in big.rows.splits[split]}


def test_seeds_visit_every_row_of_the_split_once_then_repeat(gsm8k):
    task = dataset_task("test_gsm8k", spec(gsm8k))
    n = len(task.rows.splits["train"])
    rows = [task.generate(s).params["row"] for s in range(n)]
    assert sorted(rows) == sorted(r.index for r in task.rows.splits["train"])
    assert task.generate(n + 5).question == task.generate(5).question
    assert task.generate(2**62 + 1).question == task.generate(2**62 + 1).question  # trainer-sized seeds


def test_a_separate_eval_file_gives_the_eval_split(tmp_path, gsm8k):
    held = write_jsonl(tmp_path / "test.jsonl", gsm8k_rows(5, start=100))
    task = dataset_task("test_gsm8k", spec(gsm8k, eval_path=held))
    assert len(task.rows.splits["train"]) == 40
    assert {task.generate(s, split="eval").params["row"] for s in range(5)} == {0, 1, 2, 3, 4}


def test_without_a_difficulty_column_the_knob_is_accepted_and_ignored(gsm8k):
    task = dataset_task("test_gsm8k", spec(gsm8k))
    assert task.difficulty_space().params == ()
    easy, hard = task.generate(3, 0.0), task.generate(3, 1.0)
    assert easy.question == hard.question and easy.difficulty == 0.0 and hard.difficulty == 1.0


def test_the_knob_selects_difficulty_buckets_from_easiest_to_hardest(gsm8k):
    task = dataset_task("test_levels", spec(gsm8k, difficulty_column="level", eval_fraction=0.2))
    assert task.rows.bounds == (1.0, 2.0, 3.0)  # three distinct levels: one bucket each
    levels = {r.index: r.difficulty for r in task.rows.splits["train"]}
    for knob, level in [(0.0, 1.0), (0.5, 2.0), (0.49, 1.0), (1.0, 3.0)]:  # bucket = floor(knob * 2)
        assert {levels[task.generate(s, knob).params["row"]] for s in range(10)} == {level}


def test_many_difficulty_values_fall_into_equal_count_buckets():
    assert bucket_bounds([float(v) for v in range(1, 11)], 5) == (2.0, 4.0, 6.0, 8.0, 10.0)
    assert bucket_bounds([3.0, 1.0, 1.0, 2.0], 5) == (1.0, 2.0, 3.0)


def test_text_difficulties_like_level_3_are_read_as_numbers(tmp_path):
    rows = [{"question": f"q{i}", "answer": str(i), "level": f"Level {i % 2 + 1}"} for i in range(20)]
    task = dataset_task(
        "test_text_levels",
        DatasetSpec(path=write_jsonl(tmp_path / "m.jsonl", rows), difficulty_column="level", eval_fraction=0.3),
    )
    assert task.rows.bounds == (1.0, 2.0)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_parquet_and_csv_files_load_like_jsonl(tmp_path, suffix):
    import datasets

    path = str(tmp_path / f"rows{suffix}")
    table = datasets.Dataset.from_list(gsm8k_rows(20))
    table.to_parquet(path) if suffix == ".parquet" else table.to_csv(path, index=False)
    task = dataset_task(f"test_{suffix[1:]}", spec(path, eval_fraction=0.3))
    assert len(task.rows.splits["train"]) + len(task.rows.splits["eval"]) == 20


def test_multiple_choice_rows_show_lettered_options_and_take_the_letter(tmp_path):
    rows = [{"q": f"Capital of country {i}?", "options": ["Paris", "Rome", "Oslo"], "label": i % 3} for i in range(20)]
    task = dataset_task(
        "test_mc",
        DatasetSpec(
            path=write_jsonl(tmp_path / "mc.jsonl", rows),
            prompt="q",
            answer="label",
            choices="options",
            verifier="choice",
            eval_fraction=0.3,
        ),
    )
    p = task.generate(0)
    assert p.question.endswith("\nA. Paris\nB. Rome\nC. Oslo")
    assert p.answer == "ABC"[p.params["row"] % 3]
    assert task.verify(p, f"<answer>({p.answer}) the capital</answer>").correct
    assert not task.verify(p, "<answer>D</answer>").correct


@pytest.mark.parametrize(
    ("name", "options", "answer", "target", "correct"),
    [
        ("exact", {}, "Paris", "Paris", True),
        ("exact", {}, "paris", "Paris", False),
        ("normalized", {}, "  the   PARIS. ", "the Paris", True),
        ("numeric", {}, "1,234", "1234", True),
        ("numeric", {}, "3/4", "0.75", True),
        ("numeric", {}, "$12.50", "12.5", True),
        ("numeric", {}, "100.5", "100", False),
        ("numeric", {"rel_tol": 0.01}, "100.5", "100", True),
        ("choice", {}, "b) Rome", "B", True),
        ("choice", {}, "C", "B", False),
        ("regex", {}, "2024-01-05", r"\d{4}-\d{2}-\d{2}", True),
        ("regex", {}, "2024-1-5", r"\d{4}-\d{2}-\d{2}", False),
        ("math", {}, "\\frac{1}{2}", "0.5", True),
        ("math", {}, "\\{2, 1\\}", "\\{1, 2\\}", True),
        ("math", {}, "(0, 1]", "(0, 1]", True),
        ("math", {}, "[0, 1]", "(0, 1]", False),
        ("math", {}, "x^2 + 2x + 1", "(x+1)^2", True),
    ],
)
def test_verifiers(name, options, answer, target, correct):
    result = DATASET_VERIFIERS.lookup(name).bind(name, options)(answer, target)
    score = result[0] if isinstance(result, tuple) else result
    assert (score == 1.0) is correct


def test_the_math_verifier_makes_the_task_impure_and_numeric_keeps_it_pure(gsm8k):
    assert dataset_task("test_gsm8k", spec(gsm8k)).pure is True
    assert dataset_task("test_math", DatasetSpec(path=gsm8k, answer_after="####", verifier="math")).pure is False


def test_unparseable_or_hostile_answers_get_a_verdict_not_an_exception(gsm8k):
    task = dataset_task("test_math", DatasetSpec(path=gsm8k, answer_after="####", verifier="math"))
    p = task.generate(0)
    for junk in ["", "<answer>((((</answer>", "<answer>\\frac{</answer>", "<answer>" + "9" * 5000 + "</answer>"]:
        assert not task.verify(p, junk).correct


CALLABLES = """
def last_digit(extracted, target):
    return extracted[-1:] == target[-1:]

def explodes(extracted):
    raise ValueError("no")

def lenient(extracted, **kwargs):
    return extracted.strip() == str(kwargs["target"]).strip()

def trl_style(completions, **kwargs):
    return [1.0 for _ in completions]
"""


def test_a_python_callable_is_a_verifier_and_a_raising_one_is_a_verifier_error(tmp_path, monkeypatch, gsm8k):
    (tmp_path / "my_verifiers.py").write_text(textwrap.dedent(CALLABLES))
    monkeypatch.syspath_prepend(str(tmp_path))
    task = dataset_task("test_cb", DatasetSpec(path=gsm8k, answer_after="####", verifier="my_verifiers:last_digit"))
    p = task.generate(0)
    assert task.verify(p, f"<answer>1{p.answer}</answer>").correct
    assert task.pure is False
    bad = dataset_task("test_cb2", DatasetSpec(path=gsm8k, answer_after="####", verifier="my_verifiers:explodes"))
    assert bad.verify(bad.generate(0), "<answer>7</answer>").reason == "verifier_error"


def test_a_verifier_may_take_kwargs_but_not_a_batch(tmp_path, monkeypatch, gsm8k):
    (tmp_path / "my_verifiers.py").write_text(textwrap.dedent(CALLABLES))
    monkeypatch.syspath_prepend(str(tmp_path))
    task = dataset_task("test_cb3", DatasetSpec(path=gsm8k, answer_after="####", verifier="my_verifiers:lenient"))
    p = task.generate(0)
    assert task.verify(p, f"<answer> {p.answer} </answer>").correct
    with pytest.raises(UserError, match=r"must score one response.*not completions"):
        dataset_task("test_cb4", DatasetSpec(path=gsm8k, answer_after="####", verifier="my_verifiers:trl_style"))


def test_a_task_entry_takes_the_dataset_fields_inline_or_nested():
    inline = TaskSpec.model_validate(
        {"dataset": "d.jsonl", "name": "gsm8k", "answer_after": "####", "difficulty": 0.3}
    )
    nested = TaskSpec.model_validate(
        {"name": "gsm8k", "difficulty": 0.3, "dataset": {"path": "d.jsonl", "answer_after": "####"}}
    )
    assert inline == nested and inline.dataset.answer_after == "####" and inline.difficulty == 0.3


def test_a_registered_dataset_task_works_by_name_and_inside_env_wrappers(gsm8k):
    from polyrl.envs.env_registry import get_env_task

    dataset_task("test_gsm8k", spec(gsm8k))
    assert get_task("test_gsm8k").generate(4).question == dataset_task("test_gsm8k", spec(gsm8k)).generate(4).question
    env = get_env_task("env/retry:test_gsm8k")
    p = env.generate(4)
    assert p.task == "env/retry:test_gsm8k" and env.verify(p, f"<answer>{p.answer}</answer>").correct


def test_exported_train_and_eval_problems_share_no_prompt(tmp_path, gsm8k):
    task = dataset_task("test_gsm8k", spec(gsm8k, eval_fraction=0.25))
    n_eval = len(task.rows.splits["eval"])
    export_problems(tmp_path / "train.jsonl", [task.generate(s, split="train") for s in range(30)])
    export_problems(tmp_path / "eval.jsonl", [task.generate(s, split="eval") for s in range(n_eval)])
    loaded = load_problems(tmp_path / "eval.jsonl")
    assert task.verify(loaded[0], f"<answer>{loaded[0].answer}</answer>").correct
    assert find_leakage(load_problems(tmp_path / "train.jsonl"), loaded).shared_prompts == 0


def _train_config(tmp_path, task_entry) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"tasks": [task_entry], "run_dir": str(tmp_path / "run")}))
    return str(path)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"answer": "solution"}, r"gsm8k.jsonl has no column 'solution'; its columns: question, answer, level"),
        ({"answer_after": "%%%"}, r"gsm8k.jsonl row 0: answer has no '%%%' marker"),
        ({"answer_after": None}, r"gsm8k.jsonl row 0: answer 'He has 0 .*' is not a number \(verifier numeric\)"),
        ({"verifier": "maths"}, r"unknown dataset verifier 'maths'; did you mean math"),
        ({"verifier": "nowhere_mod:f"}, r"callable 'nowhere_mod:f': cannot import 'nowhere_mod'"),
        (
            {"verifier_options": {"tol": 1}},
            r"verifier 'numeric' does not take option\(s\) tol; known: rel_tol, abs_tol",
        ),
        ({"dataset": "missing.jsonl"}, r"dataset file missing.jsonl does not exist"),
        ({"eval_fraction": 0.001}, r"eval_fraction 0.001 of 40 rows leaves no eval rows"),
    ],
)
def test_bad_dataset_input_is_one_line_and_exit_code_2(tmp_path, gsm8k, capsys, monkeypatch, entry, message):
    monkeypatch.chdir(tmp_path)
    task = {"name": "gsm8k", "dataset": gsm8k, "answer_after": "####", "verifier": "numeric", **entry}
    assert run(["train", "--config", _train_config(tmp_path, task)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert re.search(message, err), err


def test_an_empty_file_is_a_user_error(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(UserError, match=r"empty\.jsonl is empty"):
        dataset_task("test_empty", DatasetSpec(path=str(tmp_path / "empty.jsonl")))


def test_a_dataset_name_may_not_shadow_a_built_in_task(gsm8k):
    with pytest.raises(UserError, match="'addition' is already the name of a registered task"):
        dataset_task("addition", spec(gsm8k))


def test_dataset_and_generated_tasks_train_together(tmp_path, gsm8k, tiny_train_config):
    from polyrl.train.trainer import Trainer

    mix = [
        {"name": "addition", "difficulty": "easy"},
        {
            "name": "gsm8k_mix",
            "dataset": gsm8k,
            "answer_after": "####",
            "verifier": "numeric",
            "difficulty_column": "level",
            "eval_fraction": 0.25,
        },
    ]
    control = {"enabled": True, "window": 4, "step_size": 0.5}
    cfg = tiny_train_config(tasks=mix, rl__steps=2, rl__task_normalize=True, difficulty_control=control)
    results = Trainer(cfg).run()
    assert set(results["after_rl"]) == {"addition", "gsm8k_mix", "mean"}
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["stage"] == "rl"][-1]
    assert "reward/gsm8k_mix" in last and "difficulty/gsm8k_mix" in last


def test_cli_commands_take_dataset_tasks_from_a_config(tmp_path, gsm8k, capsys):
    from polyrl.policy.loading import ModelConfig, load_policy

    entry = {"name": "gsm8k_cli", "dataset": gsm8k, "answer_after": "####", "verifier": "math", "eval_fraction": 0.25}
    config = _train_config(tmp_path, entry)
    train, held = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    for split, out, n in (("train", train, 20), ("eval", held, 5)):
        args = ["tasks", "export", "--config", config, "--tasks", "gsm8k_cli", "--n", str(n), "--split", split]
        assert run([*args, "--out", str(out)]) == 0
    assert run(["tasks", "check-leakage", str(train), str(held), "--fail"]) == 0
    model = tmp_path / "model"
    load_policy(
        ModelConfig(tiny={"hidden_size": 16, "intermediate_size": 32, "num_layers": 1, "num_heads": 2}), device=HOST
    ).save(model)
    args = ["eval", "--model", str(model), "--config", config, "--tasks", "gsm8k_cli", "--n", "3", "--samples", "2"]
    assert run([*args, "--max-new-tokens", "4", "--out", str(tmp_path / "ev")]) == 0
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert "gsm8k_cli" in json.dumps(results) and "pass@2" in json.dumps(results)


def test_a_mix_entry_can_wrap_its_dataset_in_an_environment(gsm8k):
    from polyrl.tasks import resolve_task

    entry = TaskSpec.model_validate({"name": "env/retry:gsm8k_env", "dataset": gsm8k, "answer_after": "####"})
    env = resolve_task(entry.name, dataset=entry.dataset)
    assert env.name == "env/retry:gsm8k_env" and get_task("gsm8k_env").name == "gsm8k_env"
    problem = env.generate(7)
    assert env.reference_actions(problem) == [f"<answer>{problem.answer}</answer>"]


def test_asking_for_more_eval_problems_than_eval_rows_warns_once(gsm8k, capsys):
    task = dataset_task("test_repeats", spec(gsm8k, eval_fraction=0.25))
    n = len(task.rows.splits["eval"])
    problems = [task.generate(s, split="eval") for s in range(n + 2)]
    assert problems[n].question == problems[0].question
    assert capsys.readouterr().err.count(f"task test_repeats has {n} eval rows") == 1


def test_the_worked_example_config_builds_its_task_and_reward_term(monkeypatch):
    from pathlib import Path

    from polyrl.rewards import RewardScorer
    from polyrl.tasks import resolve_task
    from polyrl.train.config import load_config

    root = Path(__file__).parents[2]
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root / "examples"))
    config = load_config("configs/gsm8k_demo.yaml")
    task = resolve_task(config.tasks[0].name, dataset=config.tasks[0].dataset)
    assert (len(task.rows.splits["train"]), len(task.rows.splits["eval"])) == (171, config.eval.problems_per_task)
    assert task.pure is False  # verifier: math
    assert RewardScorer(config.reward, ["gsm8k"], device=HOST).sources.keys() == {"brevity"}


def test_an_impure_dataset_task_travels_to_a_verifier_worker_without_its_rows(gsm8k):
    import pickle

    task = dataset_task("test_math", DatasetSpec(path=gsm8k, answer_after="####", verifier="math"))
    p = task.generate(0)
    copy = pickle.loads(pickle.dumps(task))
    assert "rows" not in copy.__dict__ and copy.name == "test_math" and copy.pure is False
    assert copy.verify_in_process(p, f"<answer>{p.answer}</answer>").correct
    assert task.verify(p, f"<answer>{p.answer}.0</answer>").correct  # through the isolated worker pool


def test_a_math_target_that_cannot_be_parsed_is_named_in_the_verdict():
    assert DATASET_VERIFIERS.lookup("math").bind("math", {})("2", "") == (0.0, "target_unparseable")


def test_a_regex_that_backtracks_on_a_crafted_answer_times_out_in_the_worker_pool(tmp_path):
    rows = [{"question": f"Say a word {i}", "answer": "(a+)+b"} for i in range(20)]
    task = dataset_task("test_redos", DatasetSpec(path=write_jsonl(tmp_path / "r.jsonl", rows), verifier="regex"))
    assert task.pure is False
    p = task.generate(0)
    assert task.verify(p, "<answer>aab</answer>").correct
    assert task.verify(p, "<answer>" + "a" * 40 + "c</answer>").reason == "verifier_timeout"
