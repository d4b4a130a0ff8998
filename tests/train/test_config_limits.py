"""Values a config or a ``key=value`` override can hold but a run cannot: each is one line (exit code 2) when the
config is loaded or the run is built, before training starts or the run directory's config is written
(issue #36, "configs and overrides")."""

from pathlib import Path

import pytest

from polyrl.cli import run
from polyrl.errors import UserError
from polyrl.policy.threads import MAX_THREADS, check_threads
from polyrl.train.config import load_config
from polyrl.train.trainer import Trainer

DEFAULT = Path(__file__).parents[2] / "src" / "polyrl" / "configs" / "default.yaml"


def refused(overrides: list[str]) -> str:
    with pytest.raises(UserError) as err:
        load_config(DEFAULT, overrides)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(
    "override, message",
    [
        ("threads=10000", "threads: 10000 torch threads is more than the"),
        (f"seed={2**70}", "seed: Input should be less than or equal to 9223372036854775807"),
        ("seed=-1", "seed: Input should be greater than or equal to 0"),
        ("sft.lr=1e308", "sft.lr: Input should be less than or equal to 1"),
        ("rl.critic.lr=2", "rl.critic.lr: Input should be less than or equal to 1"),
        ("model.tiny.num_heads=3", "hidden_size 128 / num_heads 3 is not a whole, even head width"),
    ],
)
def test_values_that_crashed_a_run_are_refused_when_the_config_is_loaded(override, message):
    assert message in refused([override])


def test_a_head_width_that_is_odd_is_refused_as_rotary_embeddings_turn_pairs():
    assert "hidden_size 24 / num_heads 8 is not a whole, even head width" in refused(
        ["model.tiny.hidden_size=24", "model.tiny.num_heads=8"]
    )


def test_threads_are_allowed_up_to_four_per_core_and_1024_at_most():
    assert check_threads(8, cores=2) == 8
    with pytest.raises(ValueError, match="9 torch threads is more than the 8 allowed here"):
        check_threads(9, cores=2)
    with pytest.raises(ValueError, match=f"at most {MAX_THREADS}"):
        check_threads(MAX_THREADS + 1, cores=1000)


def test_serve_refuses_thousands_of_threads(tmp_path, capsys):
    pytest.importorskip("fastapi")
    assert run(["serve", str(tmp_path), "--threads", "10000"]) == 2
    assert "--threads: 10000 torch threads is more than the" in capsys.readouterr().err


@pytest.mark.parametrize(
    "override, message",
    [
        ("rl.lr=inf", "rl.lr: Input should be a finite number"),
        ("rl.lr=.nan", "rl.lr: Input should be a finite number"),
        ("rl.kl_coef=.inf", "rl.kl_coef: Input should be a finite number"),
        ("sampler.options={temperature: .inf}", "sampler.options.temperature is inf: every number in the config"),
        ("generation.options={x: [1, .nan]}", "generation.options.x.1 is nan: every number in the config"),
        ("reward.format=-.inf", "reward.format is -inf: every number in the config must be finite"),
        ("reward.tasks={addition: {verifier: .nan}}", "reward.tasks.addition.verifier is nan"),
    ],
)
def test_no_number_in_a_config_may_be_nan_or_infinite(override, message):
    assert message in refused([override])


def test_a_response_budget_beyond_the_tiny_models_positions_is_refused():
    assert refused(["rl.max_new_tokens=100000"]) == (
        "invalid config: rl.max_new_tokens=100000 does not fit the model's 512 positions (model.tiny.max_positions), "
        "which hold the prompt and the response together: lower rl.max_new_tokens"
    )
    assert "eval.max_new_tokens=512 does not fit" in refused(["eval.max_new_tokens=512"])
    assert "rl.max_new_tokens=24 does not fit the model's 16 positions" in refused(["model.tiny.max_positions=16"])


def test_prompts_longer_than_the_positions_leave_are_refused_before_the_run_is_written(tiny_train_config):
    cfg = tiny_train_config(model={"path": "tiny", "tiny": {"hidden_size": 32, "num_heads": 2, "max_positions": 16}})
    with pytest.raises(
        UserError, match=r"the prompt of \w+ problem train/0 is \d+ tokens, more than the 8 left by the "
    ):
        Trainer(cfg)
    assert not (Path(cfg.run_dir) / "config.yaml").exists()


def test_a_real_models_positions_bound_the_response_budgets_when_the_run_is_built(tiny_train_config, tmp_path):
    from polyrl.policy.tiny import TinyModelConfig, build_tiny_policy

    model, tokenizer = build_tiny_policy(TinyModelConfig(hidden_size=32, num_heads=2, max_positions=64))
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    cfg = tiny_train_config(model={"path": str(tmp_path / "m")}, rl__max_new_tokens=100)
    with pytest.raises(
        UserError,
        match=rf"rl.max_new_tokens=100 does not fit the model's 64 positions "
        rf"\(max_position_embeddings of {tmp_path / 'm'}\)",
    ):
        Trainer(cfg)


def test_an_sft_example_longer_than_the_positions_is_refused(tiny_train_config):
    """Positions that hold every sampled sort_digits prompt and a completion of the rest, but not a prompt with
    its reference solution (ten tokens: the sorted digits in answer tags and EOS)."""
    from polyrl.policy.prompts import PromptBuilder, PromptConfig
    from polyrl.policy.tiny import build_tiny_tokenizer
    from polyrl.tasks import get_task
    from polyrl.train.lengths import SAMPLED_PROBLEMS

    prompts, task = PromptBuilder(build_tiny_tokenizer(), PromptConfig(field="question")), get_task("sort_digits")
    longest = max(
        len(prompts.ids(task.generate(seed, "easy", split=split)))
        for split in ("train", "eval")
        for seed in range(SAMPLED_PROBLEMS)
    )
    positions = max(16, longest + 1)
    tiny = {"hidden_size": 32, "num_heads": 2, "max_positions": positions}
    cfg = tiny_train_config(
        model={"path": "tiny", "tiny": tiny},
        tasks=[{"name": "sort_digits", "difficulty": "easy"}],
        rl__max_new_tokens=positions - longest,
    )
    with pytest.raises(
        UserError,
        match=rf"an SFT example \(prompt and reference solution\) takes \d+ tokens, "
        rf"more than the model's {positions} positions",
    ):
        Trainer(cfg)


def test_a_prompt_built_later_beyond_the_limit_is_refused_in_one_line(prompts):
    from polyrl.tasks import get_task

    problem = get_task("addition").generate(3, "easy")
    prompts.limit(5, "the model's 13 positions (model.tiny.max_positions) less rl.max_new_tokens=8")
    with pytest.raises(UserError) as err:
        prompts.ids(problem)
    assert str(err.value) == (
        f"the prompt of addition problem train/3 is {len(prompts.tokenizer(prompts.text(problem)).input_ids)} tokens, "
        "more than the 5 left by the model's 13 positions (model.tiny.max_positions) less rl.max_new_tokens=8"
    )


# -- issue #43: booleans where numbers belong ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "override, key",
    [
        ("rl.steps=true", "rl.steps is true"),
        ("sft.steps=false", "sft.steps is false"),
        ("rl.lr=true", "rl.lr is true"),
        ("seed=true", "seed is true"),
        ("eval.pass_k=yes", "eval.pass_k is true"),  # YAML 1.1: yes is true
        ("model.tiny.hidden_size=true", "model.tiny.hidden_size is true"),
        ("ray.num_cpus=true", "ray.num_cpus is true"),
        ("tasks=[{name: addition, difficulty: true}]", "tasks.0.difficulty is true"),
    ],
)
def test_a_boolean_is_refused_wherever_the_config_takes_a_number(override, key):
    """``rl.steps=true`` trained one step: pydantic reads true as 1 in an int or float field."""
    assert f"invalid config: {key}, a boolean: give a number" == refused([override])


@pytest.mark.parametrize("override", ["rl.steps=3", 'rl.steps="3"', "rl.lr=0.001", "rl.enabled=false"])
def test_numbers_written_as_numbers_or_quoted_and_booleans_for_switches_still_load(override):
    load_config(DEFAULT, [override])


def test_train_with_a_boolean_step_count_is_one_line_and_writes_nothing(tmp_path, capsys):
    assert run(["train", "--run-dir", str(tmp_path / "run"), "rl.steps=true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["polyrl: error: invalid config: rl.steps is true, a boolean: give a number"]
    assert not (tmp_path / "run").exists()


# -- issue #43: a group of one ------------------------------------------------------------------------------------
@pytest.mark.parametrize("advantage", ["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"])
def test_a_group_of_one_is_refused_where_the_baseline_is_the_group_s_own(advantage):
    """``rl.group_size=1`` trained nothing, without a word: every advantage 0, ``updates`` 0."""
    message = refused(["rl.group_size=1", f"rl.advantage={advantage}", "rl.dynamic_sampling=false"])
    assert f"rl.group_size=1 trains nothing with rl.advantage={advantage}: its baseline is the group's own" in message


def test_a_group_of_one_with_dynamic_sampling_is_refused_as_every_group_would_be_dropped():
    message = refused(["rl.group_size=1", "rl.advantage=reinforce_pp"])
    assert "rl.group_size=1 with rl.dynamic_sampling drops every group" in message


@pytest.mark.parametrize("advantage", ["reinforce_pp", "gae"])
def test_a_group_of_one_loads_where_the_baseline_is_the_batch_or_a_critic(advantage):
    cfg = load_config(DEFAULT, ["rl.group_size=1", f"rl.advantage={advantage}", "rl.dynamic_sampling=false"])
    assert cfg.rl.group_size == 1


@pytest.mark.parametrize("override", ["rl.steps=0", "rl.enabled=false"])
def test_a_group_of_one_loads_when_no_rl_step_runs(override):
    assert load_config(DEFAULT, ["rl.group_size=1", override]).rl.group_size == 1


def test_which_estimators_zero_a_group_of_one_is_asked_of_the_estimator():
    from polyrl.algos import zeroes_groups_of_one

    builtins = ("grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae")
    assert {n for n in builtins if zeroes_groups_of_one(n)} == {"grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"}
