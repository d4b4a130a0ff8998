"""prompt.style: the natural statement for LLMs, the terse shorthand for the embedded tiny model."""

import pytest

from polyrl import get_task
from polyrl.errors import UserError
from polyrl.policy.prompts import PromptBuilder, PromptConfig, default_style, problem_text
from polyrl.policy.tiny import build_tiny_tokenizer
from polyrl.tasks import Problem


@pytest.fixture(scope="module")
def tokenizer():
    tok = build_tiny_tokenizer()
    tok.chat_template = None  # plain text: what the builder shows is the content itself
    return tok


@pytest.fixture
def problem():
    return get_task("addition").generate(0, "easy")


def test_tiny_model_defaults_to_terse_and_any_hugging_face_model_to_natural():
    assert default_style("tiny") == "terse"
    assert default_style("/models/Qwen2.5-0.5B-Instruct") == "natural"


@pytest.mark.parametrize("saved", ["terse", "natural"])
def test_a_model_saved_in_a_polyrl_run_defaults_to_the_style_that_run_trained_with(tmp_path, saved):
    run = tmp_path / "run"
    (run / "sft_model").mkdir(parents=True)
    (run / "config.yaml").write_text(f"model: {{path: tiny}}\nprompt: {{field: question, style: {saved}}}\n")
    assert default_style(str(run / "sft_model")) == saved
    assert PromptConfig().resolved(str(run / "sft_model")).style == saved
    # an explicit style wins; a run directory with an unreadable config falls back to natural
    assert PromptConfig(style="natural").resolved(str(run / "sft_model")).style == "natural"
    (run / "config.yaml").write_text("prompt: [unclosed\n")
    assert default_style(str(run / "sft_model")) == "natural"


def test_resolved_fills_an_unset_style_from_the_model_path():
    assert PromptConfig().resolved("tiny").style == "terse"
    assert PromptConfig().resolved("/models/qwen").style == "natural"


def test_resolved_keeps_a_style_the_user_chose():
    assert PromptConfig(style="terse").resolved("/models/qwen").style == "terse"
    assert PromptConfig(style="natural").resolved("tiny").style == "natural"


def test_natural_style_shows_the_natural_prompt(tokenizer, problem):
    text = PromptBuilder(tokenizer, PromptConfig(style="natural")).text(problem)
    assert text == problem.natural_prompt + "\n"
    assert text.startswith("Compute the sum ")


def test_terse_style_shows_the_prompt_unchanged(tokenizer, problem):
    assert PromptBuilder(tokenizer, PromptConfig(style="terse")).text(problem) == problem.prompt + "\n"


def test_unresolved_style_is_terse(tokenizer, problem):
    assert PromptBuilder(tokenizer, PromptConfig()).text(problem) == problem.prompt + "\n"


def test_natural_style_with_the_question_field_shows_the_statement_without_instruction(problem):
    assert problem_text(problem, "question", "natural") == problem.natural_question
    assert "<answer>" not in problem.natural_question


def test_a_problem_without_natural_statement_falls_back_to_its_own_text():
    record = Problem.from_dict(
        {"task": "rg/x", "question": "What is 2+2?", "prompt": "What is 2+2?\nTags.", "answer": 4}
    )
    assert problem_text(record, "prompt", "natural") == "What is 2+2?\nTags."


def test_unknown_style_is_a_config_error():
    from polyrl.train.config import load_config

    with pytest.raises(UserError, match=r"prompt\.style"):
        load_config(base={"tasks": ["addition"]}, overrides=["prompt.style=verbose"])


def test_an_environment_first_message_follows_the_prompt_style(tokenizer):
    from polyrl.rollout.chat import ChatCodec
    from polyrl.tasks import resolve_task

    task = resolve_task("env/retry:addition")
    p = task.generate(0, "easy")
    first = task.make_env(p).reset()
    natural = ChatCodec(PromptBuilder(tokenizer, PromptConfig(style="natural"))).start(first, [], p)
    terse = ChatCodec(PromptBuilder(tokenizer, PromptConfig(style="terse"))).start(first, [], p)
    assert tokenizer.decode(natural) == f"{p.natural_prompt}\n"
    assert tokenizer.decode(terse) == f"{p.prompt}\n"


def test_the_saved_config_shows_the_prompt_style_actually_used():
    from polyrl.train.config import load_config

    assert load_config(None, base={"tasks": ["addition"], "model": {"path": "/m"}}).prompt.style == "natural"
    assert load_config(None, base={"tasks": ["addition"]}).prompt.style == "terse"
    explicit = {"tasks": ["addition"], "model": {"path": "/m"}, "prompt": {"style": "terse"}}
    assert load_config(None, base=explicit).prompt.style == "terse"


def test_think_tags_reach_every_verifier_of_the_run(tiny_train_config):
    from polyrl.train.trainer import Trainer

    cfg = tiny_train_config(
        tasks=["addition", "env/retry:addition"], prompt={"field": "question", "think_tags": ["<think>", "</think>"]}
    )
    trainer = Trainer(cfg)
    for task in trainer.parts.mix.tasks.values():
        assert task.answer_format.think_tags == ("<think>", "</think>")
    assert trainer.parts.mix.tasks["env/retry:addition"].inner.answer_format.think_tags == ("<think>", "</think>")
