"""Fixtures for evaluation tests: a tiny checkpoint on disk, `polyrl serve` on loopback, a scripted fake endpoint."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """An (untrained) tiny Llama saved as a plain Hugging Face checkpoint."""
    from polyrl.policy.loading import ModelConfig, load_policy

    path = tmp_path_factory.mktemp("ckpt") / "tiny_model"
    load_policy(ModelConfig(tiny=TINY)).save(path)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on."""
    return free_port()


@pytest.fixture(scope="session")
def served(tiny_checkpoint):
    """`polyrl serve`'s app for the tiny checkpoint, run by uvicorn in a thread on a free loopback port."""
    uvicorn = pytest.importorskip("uvicorn")
    from polyrl.policy.loading import ModelConfig, load_policy
    from polyrl.serve import build_app

    app = build_app(load_policy(ModelConfig(path=str(tiny_checkpoint))), "tiny")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


class FakeEndpoint:
    """A chat-completions endpoint that fails the first ``failures`` requests with ``status``, then answers ``content``."""

    def __init__(self, failures: int = 0, status: int = 500, content: str | None = "<answer>0</answer>"):
        self.failures, self.status, self.content = failures, status, content
        self.requests = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.requests += 1
                    fail = fake.requests <= fake.failures
                if fail:
                    self._send(fake.status, {"error": {"message": "try again", "type": "server_error"}})
                    return
                message = {"role": "assistant", "content": fake.content}
                self._send(
                    200,
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
                    },
                )

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_endpoint():
    made = []

    def make(**kwargs) -> FakeEndpoint:
        made.append(FakeEndpoint(**kwargs))
        return made[-1]

    yield make
    for f in made:
        f.close()
