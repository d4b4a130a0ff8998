"""LLM-as-judge: verdict parsing, and a fake OpenAI-compatible server on 127.0.0.1 that answers well, garbage, or too slowly."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from polyrl.errors import UserError
from polyrl.rewards import JudgeConfig, JudgeSource, parse_verdict


@pytest.fixture(scope="module")
def rubric(tmp_path_factory):
    path = tmp_path_factory.mktemp("rubrics") / "r.md"
    path.write_text("# Rubric\nCorrect answers score high.\n")
    return str(path)


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


class _Judge(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls += 1
        text = body["messages"][0]["content"]
        if "SLOW" in text:
            time.sleep(2.0)
            answer = "Score: 9"
        elif "GARBAGE" in text:
            answer = "the vibes are immaculate"
        else:
            answer = "Looks right. Score: 10"
        payload = {"id": "x", "object": "chat.completion", "created": 0, "model": "fake",
                   "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer}}]}
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


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_endpoint_judge_scores_caches_and_counts_failures(rubric, server):
    source = JudgeSource(_cfg(rubric, base_url=server, timeout_s=0.5, retries=1, max_concurrency=4))
    prompts = ["1+1=", "1+1=", "2+2=", "3+3="]
    responses = ["<answer>2</answer>", "<answer>2</answer>", "GARBAGE", "SLOW"]
    got = source.score(prompts, responses, [None] * 4)
    assert got[0] == (1.0, None) and got[1] == (1.0, None)
    assert got[2] == (0.0, "unparseable_verdict")
    assert got[3] == (0.0, "timeout")
    assert source.calls == 3  # the identical pair was asked once
    before = _Judge.calls
    assert source.score(["1+1="], ["<answer>2</answer>"], [None]) == [(1.0, None)]
    assert _Judge.calls == before  # served from the cache


def test_missing_rubric_and_missing_endpoint_are_user_errors(rubric, tmp_path, monkeypatch):
    with pytest.raises(UserError, match="cannot read rubric"):
        JudgeSource(_cfg(str(tmp_path / "nope.md"), base_url="http://127.0.0.1:1/v1"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UserError, match="base_url"):
        JudgeSource(_cfg(rubric))
