"""Reasoning models: the thinking block is cut off before answer extraction; chat template arguments pass through."""

import pytest

from polyrl import get_task
from polyrl.errors import UserError
from polyrl.policy.prompts import PromptBuilder, PromptConfig
from polyrl.policy.tiny import build_tiny_tokenizer
from polyrl.tasks.answers import AnswerFormat
from polyrl.tasks.thinking import split_thinking, think_format, thinking_length

TAGS = ("<think>", "</think>")
THINKING = AnswerFormat("tags", think_tags=TAGS)


def test_answer_after_the_thinking_block_is_extracted():
    ext = THINKING.extract("<think>2+2 is 4</think><answer>4</answer>")
    assert (ext.answer, ext.format_ok, ext.reason) == ("4", True, "ok")


def test_an_answer_written_only_inside_the_thinking_block_does_not_count():
    ext = THINKING.extract("<think>maybe <answer>4</answer></think> I am done.")
    assert (ext.answer, ext.reason) == (None, "no_answer")


def test_the_answer_inside_the_block_is_not_counted_twice():
    ext = THINKING.extract("<think><answer>3</answer></think><answer>4</answer>")
    assert (ext.answer, ext.format_ok) == ("4", True)


def test_a_block_that_never_closes_hides_everything():
    ext = THINKING.extract("<think>so the answer is <answer>4</answer>")
    assert (ext.answer, ext.reason) == (None, "unclosed_think")


def test_a_response_without_thinking_is_read_as_it_is():
    assert THINKING.extract("<answer>4</answer>").answer == "4"


def test_without_think_tags_the_block_is_not_special():
    assert AnswerFormat("tags").extract("<think><answer>3</answer></think>").answer == "3"


def test_the_verifier_scores_only_the_part_after_thinking():
    task = get_task("addition", answer_format=THINKING)
    p = task.generate(0, "easy")
    inside = f"<think><answer>{p.solution}</answer></think><answer>0</answer>"
    after = f"<think>carry the one</think><answer>{p.solution}</answer>"
    assert task.verify(p, inside).score == 0.0
    assert task.verify(p, after).score == 1.0


def test_split_thinking_when_the_chat_template_opened_the_block():
    split = split_thinking("add them</think><answer>7</answer>", TAGS)
    assert (split.thought, split.answer_part, split.well_formed) == ("add them", "<answer>7</answer>", True)


def test_thinking_length_counts_the_characters_between_the_tags():
    assert thinking_length("<think>abcde</think>x", TAGS) == 5
    assert thinking_length("x", TAGS) == 0


def test_think_format_rewards_exactly_one_closed_block_before_the_answer():
    assert think_format("<think>a</think><answer>1</answer>", TAGS) == 1.0
    assert think_format("<answer>1</answer>", TAGS) == 0.0
    assert think_format("<think>a</think>b<think>c</think><answer>1</answer>", TAGS) == 0.0
    assert think_format("<think>a", TAGS) == 0.0


def test_splitting_a_long_hostile_response_takes_linear_time():
    import time

    hostile = "<think>" * 50_000 + "</think>" * 50_000
    start = time.thread_time()  # CPU time of this thread: immune to a loaded machine (a quadratic split takes minutes)
    split_thinking(hostile, TAGS)
    THINKING.extract(hostile)
    assert time.thread_time() - start < 0.5


@pytest.mark.parametrize("tags", [["<think>", "<think>"], ["", "</think>"]])
def test_think_tags_must_be_two_different_tags(tags):
    from polyrl.train.config import load_config

    with pytest.raises(UserError, match="think_tags"):
        load_config(base={"tasks": ["addition"], "prompt": {"think_tags": tags}})


# A chat template that branches on enable_thinking, as Qwen3's does.
THINKING_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    tok = build_tiny_tokenizer()
    tok.chat_template = THINKING_TEMPLATE
    return tok


def test_chat_template_kwargs_reach_the_chat_template(tokenizer):
    p = get_task("addition").generate(0, "easy")
    off = PromptBuilder(tokenizer, PromptConfig(chat_template_kwargs={"enable_thinking": False})).text(p)
    assert off == f"<|user|>{p.prompt}\n<|assistant|><think></think>"


def test_without_chat_template_kwargs_the_template_uses_its_defaults(tokenizer):
    p = get_task("addition").generate(0, "easy")
    assert PromptBuilder(tokenizer, PromptConfig()).text(p) == f"<|user|>{p.prompt}\n<|assistant|>"
