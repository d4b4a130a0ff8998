"""LLM-as-judge: verdict parsing, the shared fake OpenAI-compatible server (fake_openai.py) (answers well, garbage, or
too slowly), and position-swapped pairwise judging."""

import re
import time

import pytest

from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.rewards import JudgeConfig, JudgeSource, parse_verdict

_SECTIONS = re.compile(r"## Response A\n(.*?)\n\n## Response B\n(.*?)\n\nWhich response", re.DOTALL)


def pairwise_sections(prompt: str) -> tuple[str, str]:
    """The texts shown as Response A and Response B in a pairwise judge prompt."""
    found = _SECTIONS.search(prompt)
    assert found, "not a pairwise judge prompt"
    return found.group(1), found.group(2)


def _judge_reply(prompt: str) -> str:
    """Answers well, with garbage (GARBAGE in the prompt) or too slowly (SLOW)."""
    if "SLOW" in prompt:
        time.sleep(2.0)
        return "Score: 9"
    if "GARBAGE" in prompt:
        return "the vibes are immaculate"
    return "Looks right. Score: 10"


def _cfg(rubric, **kw):
    return JudgeConfig(rubric=rubric, model="fake", **kw)


def test_pointwise_verdict_maps_the_last_score_onto_zero_one(rubric):
    assert parse_verdict(_cfg(rubric), "reasoning... Score: 3\nScore: 7") == (pytest.approx(6 / 9), None)
    assert parse_verdict(_cfg(rubric), "I cannot grade this.") == (0.0, "unparseable_verdict")
    assert parse_verdict(_cfg(rubric), "Score: 11") == (0.0, "score_out_of_range")
    assert parse_verdict(_cfg(rubric), "") == (0.0, "empty_verdict")


def test_pairwise_verdict(rubric):
    cfg = _cfg(rubric, mode="pairwise")
    assert [parse_verdict(cfg, t)[0] for t in ("[[A]]", "x [[B]]", "[[ C ]]")] == [1.0, 0.0, 0.5]
    assert parse_verdict(cfg, "A is better")[1] == "unparseable_verdict"


def test_endpoint_judge_scores_caches_and_counts_failures(rubric, fake_openai):
    server = fake_openai(_judge_reply)
    source = JudgeSource(_cfg(rubric, base_url=server.url, timeout_s=0.5, retries=1, max_concurrency=4), device=HOST)
    prompts = ["1+1=", "1+1=", "2+2=", "3+3="]
    responses = ["<answer>2</answer>", "<answer>2</answer>", "GARBAGE", "SLOW"]
    got = source.score(prompts, responses, [None] * 4)
    assert got[0] == (1.0, None) and got[1] == (1.0, None)
    assert got[2] == (0.0, "unparseable_verdict")
    assert got[3] == (0.0, "timeout")
    assert source.calls == 3  # the identical pair was asked once
    before = server.calls
    assert source.score(["1+1="], ["<answer>2</answer>"], [None]) == [(1.0, None)]
    assert server.calls == before  # served from the cache


def test_missing_rubric_and_missing_endpoint_are_user_errors(rubric, tmp_path, monkeypatch):
    with pytest.raises(UserError, match="cannot read rubric"):
        JudgeSource(_cfg(str(tmp_path / "nope.md"), base_url="http://127.0.0.1:1/v1"), device=HOST)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UserError, match="base_url"):
        JudgeSource(_cfg(rubric), device=HOST)


# -- position-swapped pairwise judging ------------------------------------------------------------------


class FakeClient:
    """An in-process judge client: ``answer(prompt)`` is the text, or a ``(None, reason)`` failure; records each batch."""

    def __init__(self, answer):
        self.answer = answer
        self.batches: list[list[str]] = []

    def complete_many(self, prompts):
        self.batches.append(list(prompts))
        out = [self.answer(p) for p in prompts]
        return [a if isinstance(a, tuple) else (a, None) for a in out]


def _pairwise(rubric, client, **kw):
    return JudgeSource(_cfg(rubric, mode="pairwise", **kw), client=client, device=HOST)


PROBLEMS = ["1+1=", "2+2=", "3+3="]
REFERENCES = ["2", "4", "6"]


def _quality(text: str, right: str) -> tuple[bool, bool]:
    """Correct first, then inside answer tags: the references are bare numbers, so a tagged right answer beats them."""
    return re.sub(r"</?answer>", "", text).strip() == right, text.startswith("<answer>")


def _fair_judge(prompt: str) -> str:
    question = re.search(r"## Problem\n(.*?)\n", prompt).group(1)
    right = str(sum(int(x) for x in question.rstrip("=").split("+")))
    a, b = (_quality(x, right) for x in pairwise_sections(prompt))
    return "[[A]]" if a > b else "[[B]]" if b > a else "Equally good. [[C]]"


def test_swapping_cancels_a_judge_that_always_prefers_the_first_answer(rubric):
    responses = ["<answer>2</answer>", "<answer>5</answer>", "6"]
    client = FakeClient(lambda p: "Response A is better. [[A]]")
    source = _pairwise(rubric, client)
    assert source.score(PROBLEMS, responses, REFERENCES) == [(0.5, None)] * 3
    assert len(client.batches) == 1 and len(client.batches[0]) == 6  # both orders of every pair in one call
    assert [pairwise_sections(p) for p in client.batches[0][:2]] == [(responses[0], "2"), ("2", responses[0])]
    assert (source.calls, source.position_checked, source.position_inconsistent) == (6, 3, 3)

    unswapped = _pairwise(rubric, FakeClient(lambda p: "[[A]]"), swap_positions=False)
    assert unswapped.score(PROBLEMS, responses, REFERENCES) == [(1.0, None)] * 3
    assert (unswapped.calls, unswapped.position_checked, unswapped.position_inconsistent) == (3, 0, 0)


def test_swapped_fair_judge_at_an_endpoint_pays_wins_losses_and_ties(rubric, fake_openai):
    server = fake_openai(_fair_judge)
    source = JudgeSource(_cfg(rubric, mode="pairwise", base_url=server.url, max_concurrency=3), device=HOST)
    # right and tagged (beats the bare reference), wrong (loses), right but bare (ties with the reference)
    got = source.score(PROBLEMS, ["<answer>2</answer>", "<answer>5</answer>", "6"], REFERENCES)
    assert got == [(1.0, None), (0.0, None), (0.5, None)]
    assert server.calls == 6 and source.position_inconsistent == 0 and source.position_checked == 3
    # in the swapped order the response is B, and [[B]] is its win
    assert sorted(pairwise_sections(p) for p in server.prompts if p.count("<answer>2</answer>")) == [
        ("2", "<answer>2</answer>"),
        ("<answer>2</answer>", "2"),
    ]


@pytest.mark.parametrize("failure, reason", [("no idea", "unparseable_verdict"), ((None, "timeout"), "timeout")])
def test_a_failed_swapped_call_zeroes_the_sample_with_its_reason(rubric, failure, reason):
    def answer(prompt):
        _, b = pairwise_sections(prompt)
        return failure if "FLAKY" in b else "[[C]]"  # fails only when the flaky response is shown second

    client = FakeClient(answer)
    source = _pairwise(rubric, client)
    flaky = "<answer>2</answer> FLAKY"
    assert source.score(["1+1=", "2+2="], [flaky, "<answer>4</answer>"], ["2", "4"]) == [(0.0, reason), (0.5, None)]
    assert source.position_checked == 1 and source.position_inconsistent == 0
    # the first order's verdict was cached, the failure was not: asking again re-sends only the swapped prompt
    assert source.score(["1+1="], [flaky], ["2"]) == [(0.0, reason)]
    assert [pairwise_sections(p) for p in client.batches[-1]] == [("2", flaky)]


def test_a_repeated_pair_is_judged_once_per_order(rubric):
    client = FakeClient(lambda p: "[[A]]")
    source = _pairwise(rubric, client)
    assert source.key("1+1=", "x", "2") != source.key("1+1=", "x", "2", swapped=True)
    assert source.score(["1+1=", "1+1="], ["x", "x"], ["2", "2"]) == [(0.5, None)] * 2
    assert len(client.batches[0]) == 2  # the duplicate pair: two prompts, not four
    assert source.score(["1+1="], ["x"], ["2"]) == [(0.5, None)]
    assert len(client.batches) == 1 and source.calls == 2  # no new call
    assert source.position_inconsistent == 3  # every sample scored, cached ones included

    uncached = _pairwise(rubric, FakeClient(lambda p: "[[A]]"), cache=False)
    uncached.score(["1+1="], ["x"], ["2"])
    uncached.score(["1+1="], ["x"], ["2"])
    assert uncached.calls == 4


def test_scorer_marks_position_inconsistent_samples_without_failing_them(rubric, fake_openai):
    from polyrl.rewards import RewardConfig, RewardScorer, score
    from polyrl.rollout import Trajectory
    from polyrl.tasks import get_task

    server = fake_openai(lambda p: "[[A]]")
    task = get_task("addition")
    trajs = []
    for seed in range(3):
        problem = task.generate(seed, "easy")
        text = f"<answer>{problem.solution}</answer>"
        verdict = task.verify(problem, text)
        trajs.append(
            Trajectory(
                "addition", seed, problem, [1], [2], text, True, verdict.score, {"verifier": verdict.score}, verdict
            )
        )
    config = RewardConfig(judge=0.5, judge_source=_cfg(rubric, mode="pairwise", base_url=server.url))
    scorer = RewardScorer(config, ["addition"], device=HOST)
    score(trajs, {"addition": task}, config, 16, scorer)
    for t in trajs:
        assert t.reward_terms["judge"] == 0.5 and t.reward == pytest.approx(1.0 + 0.5 * 0.5)
        assert t.judge_position_inconsistent is True and not t.reward_failures
    assert scorer.sources["judge"].judge_source.position_inconsistent == 3 and server.calls == 6


def test_local_judge_failures_are_reasons_not_crashes(rubric, monkeypatch):
    from polyrl.rewards.judge import JudgeConfig, LocalJudgeClient

    client = LocalJudgeClient(
        JudgeConfig(rubric=str(rubric), backend="local", model="tiny", max_tokens=8), device=HOST
    )
    limit = client.policy.model.config.max_position_embeddings
    answers = client.complete_many(["short question", "x" * (limit + 10)])
    assert answers[0][1] is None and answers[1] == (None, "judge_prompt_too_long")

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(client.backend, "generate", broken)
    with pytest.warns(UserWarning, match="local judge failed"):
        assert client.complete_many(["a", "b"]) == [(None, "judge_error"), (None, "judge_error")]


def test_local_judge_reads_a_vision_language_models_context_from_its_text_config(rubric, tmp_path):
    """An Idefics3 keeps max_position_embeddings in its text config only; a local judge built on one still refuses
    the prompts that cannot fit rather than sending them to generation."""
    from small_vlms import save_idefics3

    from polyrl.rewards.judge import JudgeConfig, LocalJudgeClient

    path = save_idefics3(tmp_path / "vlm")
    client = LocalJudgeClient(JudgeConfig(rubric=str(rubric), backend="local", model=str(path), max_tokens=4), HOST)
    assert getattr(client.policy.model.config, "max_position_embeddings", None) is None
    assert client.positions == client.policy.model.config.get_text_config().max_position_embeddings == 512
    answers = client.complete_many(["short question", "x" * 600])
    assert answers[0][1] is None and isinstance(answers[0][0], str)
    assert answers[1] == (None, "judge_prompt_too_long")
