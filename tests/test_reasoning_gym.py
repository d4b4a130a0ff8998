"""The rg/<name> adapter: agrees with reasoning-gym's own scorer, is deterministic, and fails clearly."""

import json
import sys

import pytest

pytest.importorskip("reasoning_gym")

from polyrl.errors import UserError
from polyrl.tasks import reasoning_gym as adapter
from polyrl.tasks.reasoning_gym import rg_task_class, rg_task_classes

FAST = [
    "basic_arithmetic",
    "chain_sum",
    "letter_counting",
    "spell_backward",
    "caesar_cipher",
    "number_sorting",
    "gcd",
    "lcm",
    "word_sorting",
    "base_conversion",
    "count_bits",
    "mini_sudoku",
    "maze",
    "family_relationships",
    "fraction_simplification",
]


def _own_score(task, problem, answer):
    """What reasoning-gym itself says about ``answer`` for the item behind ``problem``."""
    import reasoning_gym

    dataset = reasoning_gym.create_dataset(task.rg_dataset, seed=0, size=1)
    return dataset.score_answer(answer, problem.answer)


@pytest.mark.parametrize("name", FAST)
def test_adapter_agrees_with_reasoning_gym_on_reference_and_wrong_answers(name):
    task = rg_task_class(name)()
    for seed in range(3):
        for difficulty in ("easy", "hard"):
            p = task.generate(seed, difficulty)
            reference = p.answer["answer"]
            assert p.solution == reference, "these datasets' references score 1.0 with their own scorer"
            assert task.verify(p, task.reference_response(p)).score == _own_score(task, p, reference) == 1.0
            wrong = "definitely not it"
            assert task.verify(p, f"<answer>{wrong}</answer>").score == pytest.approx(_own_score(task, p, wrong))


def test_references_that_do_not_score_get_no_solution():
    task = rg_task_class("propositional_logic")()
    problems = [task.generate(s) for s in range(3)]
    assert all(p.solution is None and task.reference_response(p) is None for p in problems)


@pytest.mark.parametrize("name", ["basic_arithmetic", "mini_sudoku"])
def test_generation_is_deterministic_and_splits_differ(name):
    task = rg_task_class(name)()
    assert task.generate(5, 0.7) == task.generate(5, 0.7)
    train = [task.generate(s, "hard", "train").question for s in range(5)]
    evals = [task.generate(s, "hard", "eval").question for s in range(5)]
    assert not set(train) & set(evals)


def test_problem_answer_is_plain_json():
    p = rg_task_class("family_relationships")().generate(1)
    assert json.loads(json.dumps(p.answer)) == p.answer


def test_difficulty_maps_knob_onto_curriculum_levels():
    task = rg_task_class("basic_arithmetic")()
    top = task.params[0].hard
    assert [task.generate(0, k).params["level"] for k in (0.0, 0.5, 1.0)] == [0, top // 2, top]
    digits = [
        max(len(str(abs(int(x)))) for x in task.generate(s, "hard").question.split() if x.isdigit()) for s in range(5)
    ]
    assert max(digits) > 1


def test_dataset_without_curriculum_says_so():
    cls = rg_task_class("acre")
    assert cls.params == () and "no curriculum" in cls.description


def test_every_dataset_but_composite_is_listed_with_its_group():
    classes = rg_task_classes()
    assert len(classes) >= 100 and "rg/composite" not in {c.name for c in classes}
    assert rg_task_class("basic_arithmetic").category == "rg/arithmetic"


def test_unknown_dataset_is_a_user_error_with_suggestions():
    with pytest.raises(UserError, match="did you mean rg/basic_arithmetic"):
        rg_task_class("basic_arithmetc")


def test_any_seed_folds_into_the_reasoning_gym_range():
    # the trainer draws seeds below 2**62; reasoning-gym takes seeds below 2**31 (2 * seed + split < 2**32)
    assert adapter.rg_seed(2**62 - 1, "eval") == 2 * (2**31 - 1) + 1
    assert adapter.rg_seed(-1, "train") == 2 * (2**31 - 1)
    task = rg_task_class("gcd")()
    big = task.generate(2**62 + 5)
    assert big.seed == 2**62 + 5 and big.question == task.generate(5).question


def test_missing_reasoning_gym_tells_how_to_install(monkeypatch):
    monkeypatch.setattr(adapter, "_CLASSES", {})
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", None)  # makes the import fail
    with pytest.raises(UserError, match=r"pip install polyrl\[rg\]"):
        rg_task_class("gcd")


def test_verify_never_raises_on_junk():
    task = rg_task_class("basic_arithmetic")()
    p = task.generate(0)
    for junk in ["", "<answer>", "<answer>\x00\xff</answer>", "<answer>" + "(" * 5000 + "</answer>"]:
        assert 0.0 <= task.verify(p, junk).score <= 1.0


def test_level_whose_config_fails_validation_falls_back_and_says_so():
    # caesar_cipher's curriculum asks for rotations above 25 from level 2 on, which its config rejects
    p = rg_task_class("caesar_cipher")().generate(0, "hard")
    assert p.params["level"] == 3 and p.answer["rg_level"] == 1 and p.solution is not None
