"""`polyrl serve` honours stream, stop, logprobs/top_logprobs and seed with the official openai client, and refuses
with a 400 what it does not implement (issue #25: they were silently ignored)."""

import math

import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

MESSAGES = [{"role": "user", "content": "12+7"}]


@pytest.fixture
def client(served):
    return openai.OpenAI(base_url=f"{served}/v1", api_key="none", max_retries=0)


def test_stream_yields_chunks_that_add_up_to_the_completion(client):
    greedy = dict(model="tiny", messages=MESSAGES, max_tokens=6, temperature=0)
    whole = client.chat.completions.create(**greedy)
    chunks = list(client.chat.completions.create(**greedy, stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_the_raw_stream_is_server_sent_events_ending_with_done(served):
    body = {"messages": MESSAGES, "max_tokens": 3, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{served}/v1/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"


def _sampled_with_text(client, **fields):
    """A seeded sampling request whose (untrained) completion has at least 4 characters, and that completion."""
    for seed in range(50):
        request = dict(model="tiny", messages=MESSAGES, max_tokens=12, temperature=1.0, seed=seed, **fields)
        response = client.chat.completions.create(**request)
        if len(response.choices[0].message.content) >= 4:
            return request, response
    raise AssertionError("no seed below 50 gave a completion of 4 characters")


def test_stop_cuts_the_completion_before_the_stop_sequence(client):
    request, response = _sampled_with_text(client)
    full = response.choices[0].message.content
    stop = full[2:4]
    cut = client.chat.completions.create(**request, stop=["never there", stop]).choices[0]
    assert cut.message.content == full[: full.find(stop)] and stop not in cut.message.content
    assert cut.finish_reason == "stop"


def test_logprobs_and_top_logprobs_are_the_models(client):
    _, response = _sampled_with_text(client, logprobs=True, top_logprobs=3)
    content = response.choices[0].logprobs.content
    assert content and "".join(t.token for t in content) == response.choices[0].message.content
    for token in content:
        tops = [t.logprob for t in token.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert token.logprob <= tops[0] + 1e-6 and sum(math.exp(t) for t in tops) <= 1 + 1e-6


def test_the_same_seed_samples_the_same_completions(client):
    sampled = dict(model="tiny", messages=MESSAGES, max_tokens=8, temperature=1.0, n=3)
    first = [c.message.content for c in client.chat.completions.create(**sampled, seed=11).choices]
    again = [c.message.content for c in client.chat.completions.create(**sampled, seed=11).choices]
    other = [c.message.content for c in client.chat.completions.create(**sampled, seed=12).choices]
    assert first == again and first != other


@pytest.mark.parametrize(
    "field, value",
    [
        ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
        ("response_format", {"type": "json_object"}),
        ("logit_bias", {"5": 10}),
        ("presence_penalty", 0.5),
        ("top_logprobs", 2),
    ],
)
def test_what_is_not_implemented_is_a_400_naming_the_field(served, field, value):
    response = httpx.post(f"{served}/v1/chat/completions", json={"messages": MESSAGES, field: value})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == field


def test_more_than_four_stop_sequences_is_a_400(served):
    body = {"messages": MESSAGES, "stop": ["a", "b", "c", "d", "e"]}
    response = httpx.post(f"{served}/v1/chat/completions", json=body)
    assert response.status_code == 400 and response.json()["error"]["param"] == "stop"
