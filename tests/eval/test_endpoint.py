"""`polyrl eval --endpoint`: against `polyrl serve` on loopback, retries, refusals, empty answers."""

import json
import time

import pytest
from fake_openai import fails_first

from polyrl.cli import run
from polyrl.errors import UserError
from polyrl.eval.endpoint_source import EndpointError, EndpointSource, normalize_base_url
from polyrl.eval.runner import run_suite
from polyrl.eval.suite import parse_suite

pytest.importorskip("openai")

SUITE = {"tasks": [{"name": "addition", "difficulties": ["easy"], "n": 3}], "max_new_tokens": 8}


def _run(source, out, resume=False):
    return run_suite(parse_suite(SUITE), source, out, "question", "fake", resume)


def test_eval_against_polyrl_serve_on_loopback(served, tmp_path, capsys):
    code = run(
        [
            "eval",
            "--endpoint",
            served,
            "--model-name",
            "tiny",
            "--tasks",
            "addition,caesar",
            "--difficulty",
            "easy",
            "--n",
            "2",
            "--samples",
            "2",
            "--max-new-tokens",
            "6",
            "--concurrency",
            "3",
            "--out",
            str(tmp_path / "ev"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert results["problems_done"] == 4 and "maj@2" in results["overall"]
    records = [json.loads(line) for line in (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 4 * 3
    assert all(1 <= r["tokens"] <= 6 for r in records)  # usage.completion_tokens from the server


def test_server_errors_and_rate_limits_are_retried(fake_openai, tmp_path):
    fake = fake_openai(fails_first(3, status=500))
    results = _run(EndpointSource(fake.url, "m", concurrency=1, backoff=0.01), tmp_path / "ev")
    assert fake.calls == 3 + 3  # three failures, then the three problems
    assert results["problems_done"] == 3

    limited = fake_openai(fails_first(2, status=429))
    _run(EndpointSource(limited.url, "m", concurrency=2, backoff=0.01), tmp_path / "ev429")
    assert limited.calls == 2 + 3


def test_endpoint_that_keeps_failing_gives_a_clear_error_and_keeps_nothing_half_written(fake_openai, tmp_path):
    fake = fake_openai(fails_first(100, status=503))
    with pytest.raises(EndpointError, match=r"failed 3 times: InternalServerError \(HTTP 503\).*rerun with --resume"):
        _run(EndpointSource(fake.url, "m", concurrency=1, retries=2, backoff=0.01), tmp_path / "ev")
    assert not (tmp_path / "ev" / "results.json").exists()


def test_unreachable_endpoint_is_retried_then_reported(tmp_path, unused_port):
    source = EndpointSource(f"http://127.0.0.1:{unused_port}", "m", retries=1, backoff=0.01, timeout=2)
    with pytest.raises(EndpointError, match="failed 2 times: APIConnectionError"):
        _run(source, tmp_path / "ev")


def test_client_errors_are_not_retried(fake_openai, tmp_path):
    fake = fake_openai(fails_first(100, status=401))
    with pytest.raises(EndpointError, match=r"refused the request: AuthenticationError \(HTTP 401\)"):
        _run(EndpointSource(fake.url, "m", concurrency=1, backoff=0.01), tmp_path / "ev")
    assert fake.calls == 1


def test_after_a_refusal_no_queued_request_is_sent_however_late_the_caller_wakes(fake_openai, tmp_path, monkeypatch):
    """The worker that got the refusal is free at once and would take the next queued request before the waiting
    thread wakes up to cancel the queue; a slow wake-up (a loaded machine) made a second call (issue #33)."""
    from polyrl.eval import endpoint_source as endpoint

    real_wait = endpoint.wait

    def slow_wait(*args, **kwargs):
        result = real_wait(*args, **kwargs)
        time.sleep(0.3)
        return result

    monkeypatch.setattr(endpoint, "wait", slow_wait)
    fake = fake_openai(fails_first(100, status=401))
    with pytest.raises(EndpointError, match="refused the request"):
        _run(EndpointSource(fake.url, "m", concurrency=1, backoff=0.01), tmp_path / "ev")
    assert fake.calls == 1


def test_partial_results_survive_a_failure_and_resume_completes_them(fake_openai, tmp_path):
    fake = fake_openai(fails_first(0))
    source = EndpointSource(fake.url, "m", concurrency=1, retries=0, backoff=0.01)
    # the connection drops from the third request on: two samples saved, then an error
    original = source.request
    calls = []

    def flaky(request):
        calls.append(request)
        if len(calls) > 2:
            raise EndpointError("endpoint down")
        return original(request)

    source.request = flaky
    with pytest.raises(EndpointError, match="2 samples are saved"):
        _run(source, tmp_path / "ev")
    source.request = original
    results = _run(source, tmp_path / "ev", resume=True)
    assert results["problems_done"] == 3 and fake.calls == 3


@pytest.mark.parametrize("content", [None, "", "\x00\x01 ~~~ <answer>", "<answer>" * 1000])
def test_empty_or_garbage_answers_score_zero_with_a_reason(fake_openai, tmp_path, content):
    fake = fake_openai(fails_first(0, content=content))
    results = _run(EndpointSource(fake.url, "m", backoff=0.01), tmp_path / "ev")
    assert results["overall"]["accuracy"] == 0.0
    records = [json.loads(line) for line in (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()]
    assert {r["reason"] for r in records} <= {"no_answer", "unclosed_tag", "malformed"}


def test_cli_reports_a_missing_api_key_variable(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("POLYRL_TEST_KEY", raising=False)
    code = run(
        [
            "eval",
            "--endpoint",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
            "POLYRL_TEST_KEY",
            "--tasks",
            "addition",
            "--out",
            str(tmp_path / "ev"),
        ]
    )
    assert code == 2 and "POLYRL_TEST_KEY" in capsys.readouterr().err


def test_base_url_gets_v1_only_when_it_has_no_path():
    assert normalize_base_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert normalize_base_url("https://api.example.com/openai/v1/") == "https://api.example.com/openai/v1"
    with pytest.raises(UserError, match="not an http"):
        normalize_base_url("127.0.0.1:8000")
