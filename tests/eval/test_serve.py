"""`polyrl serve`: the OpenAI chat-completions schema, models, health and JSON errors."""

import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")


def test_health_and_models(served):
    assert httpx.get(f"{served}/health").json() == {"status": "ok", "model": "tiny"}
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
        ({"messages": [{"role": "user", "content": "x"}], "temperature": 5}, "temperature"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
    ],
)
def test_malformed_requests_get_a_422_json_error(served, body, where):
    response = httpx.post(f"{served}/v1/chat/completions", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == where


def test_prompt_longer_than_the_context_is_a_400(served):
    response = httpx.post(
        f"{served}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 2000}]}
    )
    assert response.status_code == 400
    assert "context is 512" in response.json()["error"]["message"]


def test_serve_rejects_a_directory_that_is_not_a_checkpoint(tmp_path, capsys):
    from polyrl.cli import run

    assert run(["serve", str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err
