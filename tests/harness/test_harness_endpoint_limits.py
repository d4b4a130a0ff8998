"""The harness endpoint meets faulty and hostile agent code as `polyrl serve` meets clients: every request
that costs more than the model can use, is not well-formed HTTP or JSON, or is not a text conversation gets
a 4xx in OpenAI's error shape before anything is tokenized — never a traceback, a hang or a dropped
connection — and an episode's URL cannot be guessed."""

import json
import socket
import struct
import threading
import time
import warnings

import pytest

from polyrl.rollout.chat import ChatCodec
from polyrl.rollout.harness.endpoint import HarnessEndpoint
from polyrl.serve.limits import ServeLimits

HELLO = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def endpoint(scripted, prompts):
    """An endpoint for a 64-position model with small limits, generating for whatever waits."""
    limits = ServeLimits(max_messages=16, idle_timeout_s=0.5)
    sampling = {"temperature": 1.0, "top_p": 1.0, "greedy": False}
    ep = HarnessEndpoint(ChatCodec(prompts), scripted(lambda text: "ok"), sampling, 8, 384, 0.0, limits, positions=64)
    stop = threading.Event()

    def pump():
        while not stop.is_set():
            ep.serve_once(running=1, timeout=0.02)

    threading.Thread(target=pump, daemon=True).start()
    yield ep
    stop.set()
    ep.close()


def _raw(ep: HarnessEndpoint, request: bytes, wait: float = 5.0) -> tuple[int | None, dict | None]:
    """Send ``request`` as is; the status and JSON body of the answer (None, None: closed without one)."""
    with socket.create_connection(("127.0.0.1", ep.server.server_port), timeout=wait) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                return None, None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
        while len(body) < length:
            body += s.recv(65536)
    return int(head.split()[1]), json.loads(body)


def _post(ep: HarnessEndpoint, payload, key: str | None = None, headers: bytes | None = None) -> tuple[int, dict]:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    key = key or ep.add_episode().key
    head = headers if headers is not None else b"Content-Length: %d\r\n" % len(body)
    return _raw(ep, b"POST /%s/v1/chat/completions HTTP/1.1\r\nHost: x\r\n%s\r\n" % (key.encode(), head) + body)


def _error(answer: tuple[int, dict]) -> tuple[int, str]:
    status, body = answer
    assert (
        set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["type"] == "invalid_request_error"
    )
    return status, body["error"]["message"]


def test_a_well_formed_request_is_answered(endpoint):
    status, body = _post(endpoint, HELLO)
    assert status == 200 and body["choices"][0]["message"]["content"] == "ok"


def test_a_content_length_that_is_not_a_number_is_400(endpoint, capfd):
    for declared in (b"abc", b"-1"):
        status, message = _error(_post(endpoint, HELLO, headers=b"Content-Length: " + declared + b"\r\n"))
        assert status == 400 and "Content-Length must be a number" in message
    assert "Traceback" not in capfd.readouterr().err


def test_a_body_over_the_size_limit_is_413_before_it_is_read(endpoint):
    start = time.monotonic()
    status, message = _error(_post(endpoint, HELLO, headers=b"Content-Length: 10000000000\r\n"))
    assert status == 413 and "larger than 1048576 bytes" in message and time.monotonic() - start < 0.4


def test_a_body_shorter_than_its_content_length_is_408_after_the_read_timeout(endpoint):
    start = time.monotonic()
    status, message = _error(_post(endpoint, HELLO, headers=b"Content-Length: 999\r\n"))
    assert status == 408 and "stopped arriving" in message and 0.4 < time.monotonic() - start < 3


def test_a_body_without_content_length_is_411(endpoint):
    status, _ = _error(_post(endpoint, HELLO, headers=b"Transfer-Encoding: chunked\r\n"))
    assert status == 411


def test_json_nested_too_deep_is_400(endpoint):
    deep = b"[" * 100_000 + b"]" * 100_000
    status, message = _error(_post(endpoint, deep))
    assert status == 400 and "more than 64 deep" in message
    brackets_in_a_string = {**HELLO, "user": "[" * 5000}
    assert _post(endpoint, brackets_in_a_string)[0] == 200  # brackets inside strings do not nest


def test_more_messages_than_the_limit_are_400(endpoint):
    many = {"messages": [{"role": "user", "content": "x"}] * 10_000}
    status, message = _error(_post(endpoint, many))
    assert status == 400 and message == "10000 messages; at most 16 fit"


def test_more_characters_than_the_positions_hold_are_refused_before_tokenizing(endpoint, monkeypatch):
    from polyrl.rollout.harness.ledger import EpisodeLedger

    monkeypatch.setattr(EpisodeLedger, "render", lambda *a: pytest.fail("tokenized"))
    status, body = _post(endpoint, {"messages": [{"role": "user", "content": "y" * 20_000}]})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
    assert "20000 characters" in body["error"]["message"]


def test_a_history_longer_than_the_models_positions_is_400_context_length_exceeded(endpoint):
    history = {"messages": [{"role": "user", "content": "1 2 3 4 5 6 7 8 9 " * 8}]}  # ~150 tokens, 64 positions
    status, body = _post(endpoint, history)
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
    assert "at most 63 tokens fit (this model's context is 64)" in body["error"]["message"]


def test_a_completion_is_cut_to_the_positions_left(endpoint):
    status, body = _post(endpoint, {"messages": [{"role": "user", "content": "1 2 3 4 5 6 7 8 9 1 2 3 4"}]})
    assert status == 200 and body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] <= 64


@pytest.mark.parametrize(
    ("messages", "where"),
    [
        ([{"role": 5, "content": "x"}], "messages.0.role"),
        ([{"role": "root", "content": "x"}], "messages.0.role"),
        ([{"content": "x"}], "messages.0.role"),
        ([{"role": "user", "content": {"text": "x"}}], "messages.0.content"),
        ([{"role": "user", "content": None}], "messages.0.content"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}],
            "messages.0.content",
        ),
        ([{"role": "user", "content": "\ud800"}], "messages.0.content"),
        ([{"role": "user", "content": "1+1"}, {"role": "tool", "content": "2", "tool_call_id": "c"}], "messages.1"),
    ],
)
def test_a_message_that_is_not_a_text_conversation_turn_is_400(endpoint, messages, where):
    status, body = _post(endpoint, {"messages": messages})
    assert status == 400 and body["error"]["param"] == where, body


def test_an_unknown_episode_is_404(endpoint):
    endpoint.add_episode()
    status, body = _post(endpoint, HELLO, key="ep0-0")
    assert status == 404 and body["error"]["code"] == "unknown_url"


def test_episode_keys_are_random(endpoint):
    keys = [endpoint.add_episode().key for _ in range(3)]
    assert len(set(keys)) == 3 and all(len(k) >= 21 for k in keys)  # 16 random bytes, base64


def test_a_client_that_resets_its_connection_is_one_warning_not_a_traceback(endpoint, capfd):
    """Issue #43: socketserver printed the handler's ``ConnectionResetError`` traceback on the trainer's stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = socket.create_connection(("127.0.0.1", endpoint.server.server_port), timeout=5)
        key = endpoint.add_episode().key.encode()
        s.sendall(b"POST /%s/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{" % key)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        s.close()
        deadline = time.monotonic() + 5
        while not caught and time.monotonic() < deadline:
            time.sleep(0.02)
    assert [str(w.message) for w in caught] == [
        "a client of the harness endpoint dropped its connection mid-request (ConnectionResetError); "
        "nothing was answered on it"
    ]
    assert "Traceback" not in capfd.readouterr().err
    assert _post(endpoint, HELLO)[0] == 200  # the endpoint goes on
