"""Harness rollouts through the real ``openai`` client: a tool-using agent's episode is recorded token-exact
(each assistant turn is the ids the policy sampled; the request's new messages are masked environment ids),
and an agent that raises, hangs, edits its history or returns nothing is counted, never a crash."""

import time

import pytest
from harness_rollouts import scored_rollout

from polyrl.device import HOST
from polyrl.rollout.chat import ChatCodec
from polyrl.rollout.harness.outcome import outcome
from polyrl.rollout.harness.task import HarnessSpec, HarnessTask
from polyrl.tasks import get_task
from polyrl.train.metrics import episode_metrics

CALL = '<tool_call>{"name":"calc","arguments":{"expr":"62+41"}}</tool_call>'


def _task(agent, **spec) -> HarnessTask:
    module = "calc_agent" if agent in ("agent", "shaped_agent") else "harness_test_agents"
    return HarnessTask(get_task("addition"), HarnessSpec(fn=f"{module}:{agent}", **spec))


def _play(task, backend, prompts, group_size=2, problems=1, **kw):
    probs = [task.generate(1 + i, "easy") for i in range(problems)]
    return scored_rollout(probs, {"addition": task}, backend, prompts, group_size, 64, 384)


def _calculator_script(text: str) -> str:
    return "<answer>103</answer>" if "<|tool|>103" in text else CALL


def test_a_tool_using_episode_is_recorded_token_exact(scripted, prompts):
    backend = scripted(_calculator_script)
    trajs = _play(_task("agent"), backend, prompts)
    assert len(trajs) == 2 and {t.group for t in trajs} == {0}
    for t in trajs:
        assert t.reward == 1.0 and t.verdict.correct and t.info["end_reason"] == "returned"
        assert len(t.turn_spans) == 2 and t.info["segments"] == 1 and t.info["history_edits"] == 0
        (a1, b1), (a2, b2) = t.turn_spans
        # each turn is exactly what the backend sampled, and the second turn's prompt is the ledger so far
        sampled = [
            ids for p, ids in zip(backend.prompts, backend.completions) if p == t.prompt_ids + t.response_ids[:a2]
        ]
        assert t.response_ids[a2:b2] in sampled and t.response_ids[a1:b1] == backend.completions[0]
        assert t.policy_mask == [1] * (b1 - a1) + [0] * (a2 - b1) + [1] * (b2 - a2)
        # between the turns: the tool result as the chat template renders it after an assistant turn
        codec = ChatCodec(prompts)
        tool = {"role": "tool", "tool_call_id": "c00000000", "name": "calc", "content": "103"}
        assert t.response_ids[b1:a2] == codec.between_turns([tool], finished=True)
        assert t.reward_terms == {
            "env_return": 1.0,
            "harness/requests": 2.0,
            "harness/answer_chars": 20.0,
        }  # len("<answer>103</answer>")
    assert backend.batches == [2, 2]  # both episodes' requests generated together, turn by turn


def test_a_round_tripped_tool_call_is_counted_as_the_episodes_tool_use(scripted, prompts):
    trajs = _play(_task("agent"), scripted(_calculator_script), prompts)
    assert [(t.info["tool_calls"], t.info["tool_errors"]) for t in trajs] == [(1, 0), (1, 0)]
    metrics = episode_metrics(trajs)
    assert metrics["tool_calls/addition"] == 1.0 and metrics["tool_errors/addition"] == 0.0


def test_a_tool_result_reporting_an_error_is_a_tool_error(scripted, prompts):
    division = '<tool_call>{"name":"calc","arguments":{"expr":"62/41"}}</tool_call>'  # calc: "error: only + - *"
    trajs = _play(
        _task("agent"), scripted(lambda text: "<answer>1</answer>" if "<|tool|>" in text else division), prompts
    )
    assert [(t.info["tool_calls"], t.info["tool_errors"]) for t in trajs] == [(1, 1), (1, 1)]


def test_a_malformed_tool_call_is_a_call_and_an_error(scripted, prompts):
    broken = '<tool_call>{"name":"calc","arguments":</tool_call>'
    trajs = _play(_task("agent"), scripted(lambda text: broken), prompts)
    assert all(len(t.turn_spans) == 1 for t in trajs)  # the agent got no call to run: one request
    assert [(t.info["tool_calls"], t.info["tool_errors"]) for t in trajs] == [(1, 1), (1, 1)]


def test_the_first_prompt_renders_the_request_with_its_tools(scripted, prompts, tiny_tokenizer):
    backend = scripted(lambda text: "<answer>1</answer>")
    (t,) = _play(_task("agent"), backend, prompts, group_size=1)
    text = tiny_tokenizer.decode(t.prompt_ids)
    assert text.startswith("<|system|>Tools: calc(expr).") and text.endswith(
        "<|user|>62+41=\nGive your final answer inside <answer></answer> tags.<|assistant|>"
    )
    assert t.reward == 0.0 and not t.verdict.correct


def test_an_async_agent_gets_an_async_client(scripted, prompts):
    trajs = _play(_task("async_agent"), scripted(lambda text: "hi"), prompts, group_size=3)
    assert [t.reward for t in trajs] == [1.0, 1.0, 1.0]


def test_an_agent_taking_base_url_gets_the_url_and_none_means_the_verifier_scores(scripted, prompts):
    trajs = _play(_task("url_agent"), scripted(lambda text: "<answer>103</answer>"), prompts)
    assert all(t.verdict.correct and t.reward == 1.0 for t in trajs)


def test_an_agent_that_raises_is_counted_not_fatal(scripted, prompts):
    with pytest.warns(UserWarning, match="the agent's own bug"):
        trajs = _play(_task("raising_agent"), scripted(lambda text: "x"), prompts)
    assert [t.info["end_reason"] for t in trajs] == ["harness_error", "harness_error"]
    assert all(t.reward == 0.0 and sum(t.policy_mask) > 0 for t in trajs)  # what it generated is still there


def test_an_agent_that_never_returns_times_out(scripted, prompts):
    start = time.monotonic()
    trajs = _play(_task("hanging_agent", timeout_s=0.5), scripted(lambda text: "x"), prompts)
    assert time.monotonic() - start < 10
    assert [t.info["end_reason"] for t in trajs] == ["timeout", "timeout"]
    assert all(sum(t.policy_mask) == 0 and t.reward == 0.0 for t in trajs)  # no request: one masked token


def test_an_edited_history_opens_a_new_segment(scripted, prompts):
    trajs = _play(_task("editing_agent"), scripted(lambda text: "ok"), prompts, group_size=1)
    assert len(trajs) == 2 and all(t.info["history_edits"] == 1 and t.reward == 0.5 for t in trajs)
    assert [len(t.turn_spans) for t in trajs] == [1, 1]


def test_harness_and_plain_problems_share_a_step_in_problem_order(scripted, prompts):
    task = _task("async_agent")
    plain = get_task("sort_digits")
    probs = [plain.generate(0, "easy"), task.generate(1, "easy"), plain.generate(2, "easy")]
    trajs = scored_rollout(
        probs, {"addition": task, "sort_digits": plain}, scripted(lambda t: "x"), prompts, 2, 8, 384
    )
    assert [(t.group, t.task) for t in trajs] == [(0, "sort_digits")] * 2 + [(1, "addition")] * 2 + [
        (2, "sort_digits")
    ] * 2
    assert all(t.policy_mask is not None and len(t.policy_mask) == len(t.response_ids) for t in trajs)


@pytest.mark.parametrize(
    ("value", "reward", "correct", "terms"),
    [
        (1, 1.0, None, {}),
        (None, None, None, {}),
        ({"reward": 0.5, "correct": True, "f1": 0.25}, 0.5, True, {"f1": 0.25}),
    ],
)
def test_an_agents_return_value_is_read(value, reward, correct, terms):
    got = outcome(value)
    assert (got.reward, got.correct, dict(got.terms)) == (reward, correct, terms)


@pytest.mark.parametrize(
    ("value", "reward", "failures"),
    [
        ("1.0", 0.0, {"env_return": "not_a_number: str"}),
        ({"reward": float("nan")}, 0.0, {"env_return": "not_finite"}),
        ({"reward": 1.0, "f1": float("inf")}, 1.0, {"harness/f1": "not_finite"}),
    ],
)
def test_an_unusable_return_value_is_a_counted_failure(value, reward, failures):
    got = outcome(value)
    assert (got.reward, dict(got.failures), dict(got.terms)) == (reward, failures, {})


def test_behaviour_logprobs_are_the_sampling_models_on_the_exact_ids(prompts):
    import torch

    from polyrl.policy import TransformersBackend
    from polyrl.policy.loading import ModelConfig, load_policy

    torch.manual_seed(0)
    policy = load_policy(
        ModelConfig(path="tiny", tiny={"hidden_size": 32, "num_layers": 1, "num_heads": 2}), device=HOST
    )
    backend = TransformersBackend(policy.model, prompts.tokenizer, device=HOST)
    (t,) = _play(_task("logprob_agent"), backend, prompts, group_size=1)
    ids = torch.tensor([t.prompt_ids + t.response_ids])
    with torch.no_grad():
        full = torch.log_softmax(policy.model(input_ids=ids).logits[0, :-1].float(), -1)
    expected = full[torch.arange(ids.shape[1] - 1), ids[0, 1:]][len(t.prompt_ids) - 1 :]
    assert t.behaviour_logprobs == pytest.approx(expected.tolist(), abs=1e-4)
    # the client got the same numbers in its reply
    assert t.reward_terms["harness/logprob_sum"] == pytest.approx(sum(t.behaviour_logprobs), abs=1e-3)


def test_a_streaming_client_reads_the_same_completion(scripted, prompts):
    trajs = _play(_task("streaming_agent"), scripted(lambda text: "hello"), prompts)
    assert [t.reward_terms["harness/chars"] for t in trajs] == [5.0, 5.0]


def test_an_episode_past_its_token_budget_ends_as_token_budget(scripted, prompts):
    task = _task("chatty_agent")
    probs = [task.generate(1, "easy")]
    (t,) = scored_rollout(probs, {"addition": task}, scripted(lambda text: "words " * 5), prompts, 1, 64, 96)
    assert t.info["end_reason"] == "token_budget" and len(t.response_ids) <= 96
    assert len(t.turn_spans) >= 2 and t.info["segments"] == 1  # each request extended the one before


def test_more_episodes_than_concurrency_all_finish(scripted, prompts):
    backend = scripted(lambda text: "x")
    trajs = _play(_task("async_agent", concurrency=2), backend, prompts, group_size=3, problems=2)
    assert len(trajs) == 6 and all(t.reward == 1.0 for t in trajs)
    assert max(backend.batches) <= 2  # never more agents waiting than may run at once


def test_requests_with_different_token_limits_share_one_batch(scripted, prompts):
    backend = scripted(lambda text: "a long reply " * 4)
    trajs = _play(_task("short_agent"), backend, prompts, group_size=1, problems=4)  # seeds 1..4
    assert backend.batches == [4]
    assert [len(t.response_ids) for t in trajs] == [1, 2, 3, 4]  # each cut at its own max_tokens
    assert [t.reward for t in trajs] == [1.0] * 4 and not any(t.finished for t in trajs)


def test_an_agent_that_rewrites_its_history_still_ends_at_the_episodes_token_budget(scripted, prompts):
    task = _task("rewriting_agent")
    probs = [task.generate(1, "easy")]
    (t, *rest) = scored_rollout(probs, {"addition": task}, scripted(lambda text: "words " * 5), prompts, 1, 64, 96)
    assert t.info["end_reason"] == "token_budget" and t.info["segments"] == 1 + len(rest) > 1
    assert sum(len(x.response_ids) for x in (t, *rest)) <= 96  # the budget is the episode's, not each sequence's
