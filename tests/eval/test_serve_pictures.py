"""`polyrl serve` with a vision-language policy: OpenAI's image_url content parts (data URIs only), the prompt
rendered as training renders it, generation and log-probs with the pictures, and one clear 400 for every picture
the server refuses. The tiny VLM and a small random-initialised Hugging Face VLM of each family."""

import base64
import io
import json
import random

import pytest
import torch
from PIL import Image
from small_vlms import save_idefics3, save_qwen2_vl

from polyrl.device import HOST
from polyrl.forward.batch import ImageIds, collate
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.policy.generation import TransformersBackend
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.prompts import PromptBuilder, PromptConfig
from polyrl.serve import build_app
from polyrl.serve.limits import ServeLimits
from polyrl.tasks import get_task

testclient = pytest.importorskip("fastapi.testclient")

SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}
VISION = {"enabled": True, "image_size": 16, "patch_size": 4, "heads": 2}
SAVERS = {"idefics3": (save_idefics3, {}), "qwen2_vl": (save_qwen2_vl, {"images": {"size": 16}})}
PROMPTS = PromptConfig(field="question", style="terse")


@pytest.fixture(scope="module", params=["tiny", "idefics3", "qwen2_vl"])
def policy(request, tmp_path_factory):
    if request.param == "tiny":
        return load_policy(ModelConfig(tiny={**SMALL, "vision": VISION}), seed=0, device=HOST)
    save, model = SAVERS[request.param]
    return load_policy(ModelConfig(path=str(save(tmp_path_factory.mktemp(request.param))), **model), device=HOST)


@pytest.fixture(scope="module")
def client(policy):
    return testclient.TestClient(build_app(policy, "vlm"))


def _uri(image: Image.Image, fmt: str = "PNG") -> str:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buffer.getvalue()).decode()


def _ask(text: str, *uris: str) -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in uris]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def _post(client, messages, **body):
    return client.post("/v1/chat/completions", json={"messages": messages, **body})


def _greedy(policy, problem, max_tokens):
    """What the policy's backend generates greedily for the problem's prompt as training builds it."""
    ids = PromptBuilder(policy.tokenizer, PROMPTS, policy.image_input).ids(problem)
    backend = TransformersBackend(policy.model, policy.tokenizer, device=HOST)
    return ids, backend.generate([ids], max_new_tokens=max_tokens, greedy=True)[0]


def _problem():
    return get_task("count_shapes").generate(3, "easy")


def _refusal(response) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error["message"]


def test_a_served_completion_with_a_picture_is_the_policys_greedy_generation(policy, client):
    problem = _problem()
    ids, generation = _greedy(policy, problem, 6)
    assert isinstance(ids, ImageIds)
    body = _post(client, _ask(problem.question, _uri(problem.images[0])), max_tokens=6, temperature=0).json()
    expected = policy.tokenizer.decode(generation.completion_ids, skip_special_tokens=True)
    assert body["choices"][0]["message"]["content"] == expected
    assert body["usage"] == {
        "prompt_tokens": len(ids),
        "completion_tokens": len(generation.completion_ids),
        "total_tokens": len(ids) + len(generation.completion_ids),
    }


def test_the_served_log_probs_with_a_picture_are_the_training_forwards(policy, client):
    problem = _problem()
    ids, generation = _greedy(policy, problem, 5)
    body = _post(
        client, _ask(problem.question, _uri(problem.images[0])), max_tokens=5, temperature=0, logprobs=True
    ).json()
    served = [entry["logprob"] for entry in body["choices"][0]["logprobs"]["content"]]
    batch = collate([(ids, generation.completion_ids)], policy.tokenizer.pad_token_id or 0)
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy.model, batch)
    trained = logp[0][batch.loss_mask[0].bool()][: len(served)]
    assert len(served) >= 1 and torch.allclose(torch.tensor(served), trained.float(), atol=1e-4)


def test_a_streamed_completion_with_a_picture_is_the_same_completion(client):
    problem = _problem()
    messages = _ask(problem.question, _uri(problem.images[0]))
    whole = _post(client, messages, max_tokens=6, temperature=0).json()["choices"][0]["message"]["content"]
    events = _post(client, messages, max_tokens=6, temperature=0, stream=True).text.split("\n\n")
    chunks = [json.loads(e.removeprefix("data: ")) for e in events if e.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == whole
    assert events[-2] == "data: [DONE]"


def test_the_picture_is_read_so_another_picture_is_another_prompt(policy, client):
    problem = _problem()
    other = Image.new("RGB", problem.images[0].size, (255, 255, 255))
    prompts = [
        _post(client, _ask(problem.question, _uri(image)), max_tokens=1, temperature=0, logprobs=True).json()
        for image in (problem.images[0], other)
    ]
    first, second = (p["choices"][0]["logprobs"]["content"][0]["logprob"] for p in prompts)
    assert first != second


def test_a_text_only_request_to_a_vision_language_model_is_rendered_as_training_renders_text(policy, client):
    problem = get_task("addition").generate(0)
    ids, generation = _greedy(policy, problem, 4)
    messages = [{"role": "user", "content": problem.question}]
    body = _post(client, messages, max_tokens=4, temperature=0).json()
    assert body["usage"]["prompt_tokens"] == len(ids)
    assert body["choices"][0]["message"]["content"] == policy.tokenizer.decode(
        generation.completion_ids, skip_special_tokens=True
    )


@pytest.mark.parametrize("url", ["https://example.com/cat.png", "http://127.0.0.1/x.png", "file:///etc/passwd"])
def test_a_picture_by_url_is_refused_and_never_fetched(client, url):
    message = _refusal(_post(client, _ask("what?", url)))
    scheme = url.split(":")[0]
    assert message.startswith(f"messages.0.content image 0: a {scheme}: URL; polyrl serve does not fetch URLs")
    assert "data:image/png;base64," in message


def _wide_png() -> str:
    buffer = io.BytesIO()
    Image.new("I;16", (4, 4)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _huge_png() -> str:
    buffer = io.BytesIO()
    Image.new("1", (5000, 5000)).save(buffer, format="PNG")  # 25 M pixels in a few kilobytes
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize(
    "uri, says",
    [
        ("data:image/png;base64,iVBORw0KGgobroken", "not base64"),
        ("data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nbroken").decode(), "does not decode"),
        ("data:image/png,plain", "must be base64"),
        (_wide_png(), "more than 8 bits"),
        (_huge_png(), "over the limit of 16,777,216"),
    ],
)
def test_a_picture_polyrl_cannot_read_is_one_400_naming_it(client, uri, says):
    message = _refusal(_post(client, _ask("what?", uri)))
    assert message.startswith("messages.0.content image 0: ") and says in message, message
    assert "\n" not in message


def test_more_pictures_than_the_model_takes_in_one_prompt_is_a_400(policy, client):
    limit = getattr(policy.image_input, "max_images", None)  # a Hugging Face VLM's model.images.max_per_prompt
    if limit is None:  # the tiny VLM: as many pictures as its context holds
        limit = (policy.model.config.max_position_embeddings - 1) // policy.image_input.tokens
    dot = _uri(Image.new("RGB", (2, 2)))
    message = _refusal(_post(client, _ask("how many?", *[dot] * (limit + 1))))
    assert message.startswith(f"{limit + 1} pictures; at most {limit} fit in one prompt")


def test_a_picture_in_an_assistant_message_is_a_400(client):
    dot = _uri(Image.new("RGB", (2, 2)))
    messages = [{"role": "user", "content": "hi"}, *_ask("drew this", dot)]
    messages[1]["role"] = "assistant"
    assert "only user messages may show pictures" in _refusal(_post(client, messages))


def test_a_content_part_of_another_type_is_a_400(client):
    messages = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]
    assert _refusal(_post(client, messages))


def test_a_picture_over_the_body_size_limit_is_a_413():
    policy = load_policy(ModelConfig(tiny={**SMALL, "vision": VISION}), seed=0, device=HOST)
    client = testclient.TestClient(build_app(policy, "vlm", ServeLimits(max_request_bytes=2048)))
    noisy = Image.frombytes("RGB", (64, 64), random.Random(0).randbytes(64 * 64 * 3))  # PNG cannot compress it
    response = _post(client, _ask("what?", _uri(noisy)))
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"


def test_a_picture_sent_to_a_text_only_model_is_a_400():
    policy = load_policy(ModelConfig(tiny=SMALL), seed=0, device=HOST)
    client = testclient.TestClient(build_app(policy, "text"))
    message = _refusal(_post(client, _ask("what?", _uri(Image.new("RGB", (2, 2))))))
    assert message.startswith("this model takes text only")


def test_text_parts_to_a_text_only_model_are_its_text(tmp_path):
    policy = load_policy(ModelConfig(tiny=SMALL), seed=0, device=HOST)
    client = testclient.TestClient(build_app(policy, "text"))
    parts = [{"role": "user", "content": [{"type": "text", "text": "12+"}, {"type": "text", "text": "7"}]}]
    plain = [{"role": "user", "content": "12+\n7"}]
    answers = [_post(client, m, max_tokens=4, temperature=0).json()["choices"][0]["message"] for m in (parts, plain)]
    assert answers[0] == answers[1]


def test_a_prompt_longer_than_the_language_models_context_is_a_400(client):
    response = _post(client, _ask("x" * 3000, _uri(Image.new("RGB", (2, 2)))))
    assert _refusal(response) and response.json()["error"]["code"] == "context_length_exceeded"
