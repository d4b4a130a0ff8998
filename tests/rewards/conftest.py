"""A fake OpenAI-compatible judge server on 127.0.0.1, shared by the judge unit tests and the training runs."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


def default_answer(prompt: str) -> str:
    """Answers well, with garbage (GARBAGE in the prompt) or too slowly (SLOW)."""
    if "SLOW" in prompt:
        time.sleep(2.0)
        return "Score: 9"
    if "GARBAGE" in prompt:
        return "the vibes are immaculate"
    return "Looks right. Score: 10"


class FakeJudgeServer:
    """Chat completions answered by ``answer(prompt text)``; ``requests`` holds every prompt received."""

    def __init__(self, answer=default_answer):
        self.answer = answer
        self.requests: list[str] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = body["messages"][0]["content"]
                with outer.lock:
                    outer.requests.append(text)
                payload = {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "fake",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": outer.answer(text)},
                        }
                    ],
                }
                data = json.dumps(payload).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and hung up, as the slow case intends

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    @property
    def calls(self) -> int:
        with self.lock:
            return len(self.requests)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def judge_server():
    """``judge_server(answer=default_answer)`` starts a FakeJudgeServer, shut down after the test."""
    started = []

    def start(answer=default_answer) -> FakeJudgeServer:
        started.append(FakeJudgeServer(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.fixture(scope="session")
def rubric(tmp_path_factory):
    path = tmp_path_factory.mktemp("rubrics") / "r.md"
    path.write_text("# Rubric\nCorrect answers score high.\n")
    return str(path)
