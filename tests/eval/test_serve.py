"""`polyrl serve` over HTTP on loopback: the OpenAI chat-completions schema, models, health, and every error in
OpenAI's shape. Limits (body size, prompt length, the queue) are in test_serve_limits.py."""

import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")


def test_health_and_models(served):
    assert httpx.get(f"{served}/health").json() == {"status": "ok", "model": "tiny", "waiting": 0}
    models = httpx.get(f"{served}/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["tiny"]


def test_chat_completion_follows_the_openai_schema(served):
    client = openai.OpenAI(base_url=f"{served}/v1", api_key="none")
    response = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "12+7"}], max_tokens=5, temperature=0.8, top_p=0.9, n=3
    )
    assert response.object == "chat.completion" and len(response.choices) == 3
    assert [c.index for c in response.choices] == [0, 1, 2]
    assert all(c.message.role == "assistant" and isinstance(c.message.content, str) for c in response.choices)
    assert all(c.finish_reason in ("stop", "length") for c in response.choices)
    assert 3 <= response.usage.completion_tokens <= 15
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


def test_temperature_zero_is_greedy_and_repeatable(served):
    body = {"messages": [{"role": "user", "content": "abc"}], "max_tokens": 6, "temperature": 0}
    first = httpx.post(f"{served}/v1/chat/completions", json=body).json()
    second = httpx.post(f"{served}/v1/chat/completions", json=body).json()
    assert first["choices"][0]["message"] == second["choices"][0]["message"]


@pytest.mark.parametrize(
    "body, where",
    [
        ({"messages": []}, "messages"),
        ({}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": -0.5}, "temperature"),
        ({"messages": [{"role": "user", "content": "x"}], "top_p": 0}, "top_p"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": 5}, "temperature"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
    ],
)
def test_malformed_requests_get_a_400_json_error(served, body, where):
    response = httpx.post(f"{served}/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == where


def test_prompt_longer_than_the_context_is_a_400(served):
    response = httpx.post(
        f"{served}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 2000}]}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert "context is 512" in error["message"] and error["code"] == "context_length_exceeded"


def post_raw(served: str, body: str, content_type: str = "application/json"):
    return httpx.post(f"{served}/v1/chat/completions", content=body.encode(), headers={"content-type": content_type})


def assert_openai_error(response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["param"] == param
    return error


@pytest.mark.parametrize("field", ["temperature", "top_p"])
def test_sampling_fields_near_zero_sample_greedily(served, field):
    body = {"messages": [{"role": "user", "content": "abc"}], "max_tokens": 6, "temperature": 0}
    greedy = httpx.post(f"{served}/v1/chat/completions", json=body).json()
    tiny = httpx.post(f"{served}/v1/chat/completions", json={**body, "temperature": 1.0, field: 1e-300}).json()
    assert tiny["choices"][0]["message"] == greedy["choices"][0]["message"]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e300"])
def test_non_finite_or_huge_temperature_is_a_400(served, value):
    response = post_raw(served, '{"messages": [{"role": "user", "content": "x"}], "temperature": ' + value + "}")
    assert_openai_error(response, 400, "temperature")


def test_a_lone_surrogate_in_content_is_a_400_not_a_500(served):
    response = post_raw(served, '{"messages": [{"role": "user", "content": "a\\ud800b"}]}')
    error = assert_openai_error(response, 400, "messages.0.content")
    assert "surrogate" in error["message"]


def test_a_surrogate_pair_is_one_character_and_served(served):
    response = post_raw(served, '{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}], "max_tokens": 2}')
    assert response.status_code == 200


def test_invalid_json_is_a_400(served):
    error = assert_openai_error(post_raw(served, '{"messages": ['), 400)
    assert "not valid JSON" in error["message"]


@pytest.mark.parametrize("body", ["", "[1, 2]", '"hello"'])
def test_a_body_that_is_not_an_object_is_a_400(served, body):
    error = assert_openai_error(post_raw(served, body), 400)
    assert "must be a JSON object" in error["message"]


def test_unknown_route_is_a_404_in_openai_shape(served):
    error = assert_openai_error(httpx.get(f"{served}/v1/completions/nope"), 404)
    assert error["code"] == "unknown_url"


def test_wrong_method_is_a_405_in_openai_shape(served):
    assert_openai_error(httpx.get(f"{served}/v1/chat/completions"), 405)


def test_serve_rejects_a_directory_that_is_not_a_checkpoint(tmp_path, capsys):
    from polyrl.cli import run

    assert run(["serve", str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option, message",
    [
        (["--max-request-bytes", "10"], "--max-request-bytes: Input should be greater than or equal to 1024"),
        (["--max-waiting", "-1"], "--max-waiting: Input should be greater than or equal to 0"),
        (["--port", "0"], "--port: 0 is not a TCP port (1-65535)"),
        (["--threads", "0"], "--threads: 0; give 1 or more"),
    ],
)
def test_serve_options_out_of_bounds_are_one_line_errors(tmp_path, capsys, option, message):
    from polyrl.cli import run

    assert run(["serve", str(tmp_path), *option]) == 2
    assert capsys.readouterr().err == f"polyrl: error: {message}\n"
