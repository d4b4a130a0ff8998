"""`polyrl serve`'s limits: body size, message count, prompt length (before and after tokenizing), completion
length, the bounded queue, 500s in OpenAI's shape, and the sampling floors."""

import asyncio
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient

from polyrl.device import HOST
from polyrl.serve import ServeLimits
from polyrl.serve.api_errors import ServeError, validation_message
from polyrl.serve.limits import Admission, chars_per_token, check_prompt_chars
from polyrl.serve.schema import MIN_TEMPERATURE, Sampling, sampling

STRICT = ServeLimits(max_request_bytes=4096, max_messages=3, max_prompt_tokens=50, max_tokens=8, max_waiting=1)
CHAT = "/v1/chat/completions"


def user(content: str, **fields) -> dict:
    return {"messages": [{"role": "user", "content": content}], **fields}


@pytest.fixture(scope="module")
def tiny_policy(tiny_checkpoint):
    from polyrl.policy.loading import ModelConfig, load_policy

    return load_policy(ModelConfig(path=str(tiny_checkpoint)), device=HOST)


@pytest.fixture
def strict(tiny_policy):
    """The tiny model behind STRICT limits, in process (one event loop shared by every request)."""
    from polyrl.serve import build_app

    with TestClient(build_app(tiny_policy, "tiny", STRICT), raise_server_exceptions=False) as client:
        yield client


# -- sampling floors ---------------------------------------------------------------------------------------------


def test_temperature_below_the_floor_is_greedy():
    assert sampling(1e-300, 1.0) == Sampling(temperature=1.0, top_p=1.0, greedy=True)
    assert sampling(0.0, 0.5).greedy


def test_top_p_below_the_floor_is_greedy():
    assert sampling(0.7, 1e-300) == Sampling(temperature=1.0, top_p=1.0, greedy=True)


def test_sampling_above_the_floors_is_passed_through():
    assert sampling(MIN_TEMPERATURE, 0.9) == Sampling(temperature=MIN_TEMPERATURE, top_p=0.9, greedy=False)


# -- body size ---------------------------------------------------------------------------------------------------


def test_a_body_over_the_limit_is_a_413_from_its_content_length(strict):
    response = strict.post(CHAT, json=user("x" * 5000))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def test_a_chunked_body_over_the_limit_is_a_413_while_reading(strict):
    chunks = (b"x" * 1000 for _ in range(10))  # no Content-Length: counted as it arrives
    response = strict.post(CHAT, content=chunks, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert "4096 bytes" in response.json()["error"]["message"]


def test_a_non_numeric_content_length_is_a_413(strict):
    response = strict.post(CHAT, content=b"{}", headers={"content-length": "lots", "content-type": "application/json"})
    assert response.status_code == 413


def test_a_body_under_the_limit_is_served(strict):
    assert strict.post(CHAT, json=user("abc", max_tokens=2)).status_code == 200


# -- messages and prompt length ----------------------------------------------------------------------------------


def test_more_messages_than_the_limit_is_a_400(strict):
    body = {"messages": [{"role": "user", "content": "a"}] * 4}
    response = strict.post(CHAT, json=body)
    assert response.status_code == 400 and response.json()["error"]["param"] == "messages"


def test_tiny_tokenizer_tokens_cover_at_most_13_characters(tiny_policy):
    assert chars_per_token(tiny_policy.tokenizer) == len("<|assistant|>")


def test_a_prompt_with_more_characters_than_limit_times_k_is_refused_without_tokenizing():
    check_prompt_chars(40, limit=10, per_token=4, context=None)  # 40 characters may be 10 tokens
    with pytest.raises(ServeError) as refused:
        check_prompt_chars(41, limit=10, per_token=4, context=None)
    assert refused.value.code == "context_length_exceeded"
    assert "41 characters, so more than 10 tokens" in refused.value.message


def test_a_long_prompt_is_refused_before_the_tokenizer_runs(strict, monkeypatch):
    from polyrl.serve import app

    def tokenizer_must_not_run(*args):
        raise AssertionError("tokenized a prompt that cannot fit")

    monkeypatch.setattr(app, "prompt_ids", tokenizer_must_not_run)
    response = strict.post(CHAT, json=user("x" * 651))  # > 50 tokens × 13 characters
    assert response.status_code == 400
    assert "651 characters" in response.json()["error"]["message"]


def test_a_prompt_over_max_prompt_tokens_after_tokenizing_is_a_400(strict):
    response = strict.post(CHAT, json=user("x" * 60))  # 60 characters: 60+ tokens with the character tokenizer
    error = response.json()["error"]
    assert response.status_code == 400 and error["code"] == "context_length_exceeded"
    assert "at most 50 tokens fit (polyrl serve --max-prompt-tokens)" in error["message"]


def test_max_tokens_is_cut_to_the_cap(strict):
    response = strict.post(CHAT, json=user("abc", max_tokens=500, temperature=1.0))
    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] <= 8


def test_max_prompt_tokens_must_leave_room_in_the_context(tiny_policy):
    from polyrl.errors import UserError
    from polyrl.serve import build_app

    with pytest.raises(UserError, match="context is 512"):
        build_app(tiny_policy, "tiny", ServeLimits(max_prompt_tokens=512))


# -- the queue ---------------------------------------------------------------------------------------------------


def test_admission_refuses_one_more_than_max_waiting_with_retry_after():
    async def scenario():
        admission, release = Admission(max_waiting=1, retry_after_s=3), asyncio.Event()

        async def hold():
            async with admission.turn():
                await release.wait()

        held = [asyncio.create_task(hold()) for _ in range(2)]  # one runs, one waits
        await asyncio.sleep(0)
        assert (admission.admitted, admission.waiting) == (2, 1)
        with pytest.raises(ServeError) as refused:
            async with admission.turn():
                pass
        release.set()
        await asyncio.gather(*held)
        async with admission.turn():  # room again
            assert admission.admitted == 1
        return refused.value

    refused = asyncio.run(scenario())
    assert refused.status == 503 and refused.code == "queue_full" and refused.headers == {"Retry-After": "3"}


def test_a_full_queue_answers_503_with_retry_after(strict, monkeypatch):
    from polyrl.policy.generation import TransformersBackend

    release = threading.Event()
    generate = TransformersBackend.generate

    def slow_generate(self, *args, **kwargs):
        release.wait(timeout=30)
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(TransformersBackend, "generate", slow_generate)
    results = []
    senders = [
        threading.Thread(target=lambda: results.append(strict.post(CHAT, json=user("abc", max_tokens=2))))
        for _ in range(2)
    ]
    for s in senders:
        s.start()
    deadline = time.time() + 20
    while strict.get("/health").json()["waiting"] < 1 and time.time() < deadline:  # one runs, one waits
        time.sleep(0.02)
    refused = strict.post(CHAT, json=user("abc", max_tokens=2))
    release.set()
    for s in senders:
        s.join(timeout=30)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "queue_full"
    assert [r.status_code for r in results] == [200, 200]


def test_a_request_whose_client_left_while_waiting_is_not_generated(tiny_policy, monkeypatch):
    import json

    from polyrl.policy.generation import TransformersBackend
    from polyrl.serve import build_app

    calls = []
    monkeypatch.setattr(TransformersBackend, "generate", lambda self, *a, **k: calls.append(a))
    body = json.dumps(user("abc")).encode()
    messages = [{"type": "http.request", "body": body, "more_body": False}, {"type": "http.disconnect"}]
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": CHAT,
        "raw_path": CHAT.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }
    asyncio.run(build_app(tiny_policy, "tiny", STRICT)(scope, receive, send))
    assert calls == [] and sent[0]["status"] == 499


# -- 500s ----------------------------------------------------------------------------------------------------------


def test_an_unexpected_error_is_a_500_in_openai_shape(strict, monkeypatch):
    from polyrl.policy.generation import TransformersBackend

    def broken(self, *args, **kwargs):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(TransformersBackend, "generate", broken)
    response = strict.post(CHAT, json=user("abc"))
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "server_error" and "RuntimeError" in error["message"]
    assert "secret" not in error["message"]


def test_a_chat_template_that_refuses_the_messages_is_a_400():
    from jinja2 import TemplateError

    from polyrl.serve.app import prompt_ids

    class StrictTemplate:
        chat_template = "{{ raise_exception('roles must alternate') }}"

        def apply_chat_template(self, messages, **kwargs):
            raise TemplateError("roles must alternate")

    with pytest.raises(ServeError) as refused:
        prompt_ids(StrictTemplate(), [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert refused.value.status == 400 and "roles must alternate" in refused.value.message


def test_validation_message_names_the_field_and_drops_pydantics_prefix():
    errors = [{"type": "value_error", "loc": ("body", "messages", 0, "content"), "msg": "Value error, bad"}]
    assert validation_message(errors) == ("messages.0.content: bad", "messages.0.content")
