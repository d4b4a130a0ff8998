"""A scripted OpenAI-compatible endpoint: each reply is computed from the request's user message."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

HANG = object()
"""What a script returns to make the server sleep past any client timeout."""


class ScriptedEndpoint:
    """Answers each chat completion with ``script(user_message)``: a string (the content), ``HANG``, or an
    ``(http_status, raw_body_bytes)`` pair for junk responses."""

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
                    time.sleep(3)
                    return
                if isinstance(reply, tuple):
                    self._send(reply[0], reply[1])
                    return
                message = {"role": "assistant", "content": reply}
                choice = {"index": 0, "message": message, "finish_reason": "stop"}
                payload = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                           "choices": [choice]}  # fmt: skip
                self._send(200, json.dumps(payload).encode())

            def _send(self, status, data: bytes):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted_endpoint():
    made = []

    def make(script) -> ScriptedEndpoint:
        made.append(ScriptedEndpoint(script))
        return made[-1]

    make.hang = HANG
    yield make
    for endpoint in made:
        endpoint.close()
