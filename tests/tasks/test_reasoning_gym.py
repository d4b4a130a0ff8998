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


# -- hostile answers (issue #13): code, hangs and constant answers ------------------------------------------
EXECUTED_BEFORE = [
    "countdown",
    "puzzle24",
    "polynomial_multiplication",
    "simple_integration",
    "string_insertion",
    "spiral_matrix",
    "n_queens",
]


def test_rg_tasks_are_verified_isolated_and_survive_pickling():
    import pickle

    task = rg_task_class("puzzle24")()
    assert not task.pure
    copy = pickle.loads(pickle.dumps(task))
    assert type(copy) is type(task) and copy.answer_format == task.answer_format


@pytest.mark.parametrize("name", EXECUTED_BEFORE)
def test_answer_that_is_code_does_not_run(name, tmp_path):
    marker = tmp_path / "ran"
    task = rg_task_class(name)()
    problem = task.generate(0, "easy")
    for code in (f"__import__('os').system('touch {marker}')", f"[__import__('pathlib').Path('{marker}').touch()]"):
        verdict = task.verify(problem, f"<answer>{code}</answer>")
        assert verdict.score == 0.0
    assert not marker.exists()


@pytest.mark.parametrize("name", ["countdown", "puzzle24", "polynomial_multiplication", "simple_integration"])
def test_answers_that_hung_the_verifier_score_zero_quickly(name):
    task = rg_task_class(name)()
    problem = task.generate(0, "easy")
    for bomb in ("2**2**2**2**2**2", "9**9**9", "factorial(10**7)", "(9**99)**99"):
        verdict = task.verify(problem, f"<answer>{bomb}</answer>")
        assert verdict.score == 0.0
        assert verdict.reason in ("malformed", "wrong_numbers", "unsafe_expression")


def test_puzzle24_constant_answer_no_longer_scores():
    task = rg_task_class("puzzle24")()
    problems = [task.generate(seed) for seed in range(30)]
    constant = [task.verify(p, "<answer>4*3*2*1</answer>") for p in problems]
    fair = [p for p in problems if sorted(p.answer["metadata"]["numbers"]) != [1, 2, 3, 4]]
    assert all(v.score == 0.0 for v, p in zip(constant, problems) if p in fair)
    assert all(task.verify(p, task.reference_response(p)).correct for p in problems)


def test_puzzle24_checks_the_numbers_and_the_stated_result():
    task = rg_task_class("puzzle24")()
    problem = task.generate(1, "medium")  # 5 6 8 8
    assert problem.answer["metadata"]["numbers"] == [5, 6, 8, 8]
    assert task.verify(problem, "<answer>8*(5+6-8)</answer>").correct
    assert task.verify(problem, "<answer>8*(5+6-8) = 24</answer>").correct
    assert task.verify(problem, "<answer>8*(5+6-8) = 25</answer>").reason == "malformed"
    assert task.verify(problem, "<answer>8*(6+6-8)</answer>").reason == "wrong_numbers"
    assert task.verify(problem, "<answer>8*(5+6-8)+0*8</answer>").reason == "wrong_numbers"


def test_countdown_needs_exact_value_with_plus_minus_times_divide_only():
    task = rg_task_class("countdown")()
    problem = task.generate(0, "easy")
    meta = problem.answer["metadata"]
    assert task.verify(problem, task.reference_response(problem)).correct
    # the same numbers with a power in place of a product: upstream parse_expr accepted any operator
    assert task.verify(problem, f"<answer>{'**'.join(map(str, meta['numbers']))}</answer>").score == 0.0


def test_eval_scorers_still_read_python_lists_without_running_code():
    task = rg_task_class("string_insertion")()
    problem = task.generate(0, "easy")
    as_list = repr(list(problem.answer["answer"]))
    assert task.verify(problem, f"<answer>{as_list}</answer>").score == pytest.approx(0.1)  # upstream's credit
