"""Answer extraction: what counts as the answer, and linear time on hostile responses."""

import pytest

from polyrl.tasks.answers import AnswerFormat

TAGS = AnswerFormat("tags")


@pytest.mark.parametrize(
    ("response", "answer", "reason"),
    [
        ("think <answer> 42 </answer>", "42", "ok"),
        ("<answer>1</answer> then <answer>2</answer>", "2", "multiple_answers"),
        ("<answer>1</answer> and <answer>2", "1", "ok"),  # a trailing unclosed tag is not an answer
        ("<answer><answer>1</answer>", None, "malformed"),
        ("<answer>1", None, "unclosed_tag"),
        ("no tags", None, "no_answer"),
        ("<answer>  </answer>", None, "empty_answer"),
    ],
)
def test_tag_extraction(response, answer, reason):
    got = TAGS.extract(response)
    assert (got.answer, got.reason) == (answer, reason)


def test_unclosed_tags_cost_linear_time():
    # 25,000 unclosed tags (200 KB): a backtracking regex rescans the rest of the text from each one.
    # Counted in str.find calls, not seconds: the scan visits each tag once.
    response = "<answer>" * 25_000
    calls = 0

    class Counting(str):
        def find(self, *args):
            nonlocal calls
            calls += 1
            return str.find(self, *args)

    assert TAGS.extract(Counting(response)).reason == "unclosed_tag"
    assert calls <= 2
