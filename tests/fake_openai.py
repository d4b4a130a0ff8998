"""One fake OpenAI-compatible chat-completions server on 127.0.0.1, driven by a reply script.

The ``fake_openai`` fixture (tests/conftest.py) starts one per call and shuts it down after the test:

    server = fake_openai(lambda prompt: "Score: 10")
    ...  # point a client at server.url
    assert server.calls == 1 and server.prompts == [...]

``script(prompt)`` gets the content of the request's last message and returns one of:
a string (or None) -- the assistant's content in a 200 chat completion; ``HANG`` -- sleep past any client timeout
and answer nothing; ``(http_status, body)`` -- that status with ``body`` (a dict sent as JSON, or raw bytes).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HANG = object()
"""What a script returns to make the server sleep past any client timeout."""

HANG_SECONDS = 3.0


def fails_first(failures: int, status: int = 500, content: str | None = "<answer>0</answer>") -> Callable:
    """A script that answers the first ``failures`` requests with ``status`` and an error body, then ``content``."""
    seen = 0
    lock = threading.Lock()

    def script(prompt: str):
        nonlocal seen
        with lock:
            seen += 1
            fail = seen <= failures
        if fail:
            return status, {"error": {"message": "try again", "type": "server_error"}}
        return content

    return script


def _completion(model: str, content: str | None) -> dict:
    message = {"role": "assistant", "content": content}
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


class FakeOpenAI:
    """Chat completions answered by ``script(last message content)``; ``prompts`` holds every prompt received."""

    def __init__(self, script: Callable[[str], object]):
        self.script = script
        self.prompts: list[str] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][-1]["content"]
                with fake.lock:
                    fake.prompts.append(prompt)
                reply = fake.script(prompt)
                if reply is HANG:
                    time.sleep(HANG_SECONDS)
                    return
                if isinstance(reply, tuple):
                    status, payload = reply
                else:
                    status, payload = 200, _completion(body.get("model", "fake"), reply)
                self._send(status, payload if isinstance(payload, bytes) else json.dumps(payload).encode())

            def _send(self, status: int, data: bytes):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and hung up, as a slow script intends

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def calls(self) -> int:
        """How many requests arrived so far."""
        with self.lock:
            return len(self.prompts)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
