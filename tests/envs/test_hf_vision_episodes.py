"""Pictures in multi-turn episodes of a Hugging Face vision-language policy (the small random-initialised Idefics3,
Qwen2-VL and Qwen2.5-VL of ``tests/small_vlms.py``): an observation's picture is rendered as the processor's chat template
renders an image in a user message, expanded to the model's image tokens; the episode's tokens are exactly what
generation read and produced; the training forward scores every turn as generation did (Qwen2-VL's M-RoPE positions
over pictures in several turns are the model's own); the observation's image tokens are never trained on."""

import numpy as np
import pytest
import torch
from small_vlms import save_idefics3, save_qwen2_vl
from zoom_env import scored_and_sampled, zoom_episodes

from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.forward.batch import ImageIds, collate
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.forward.pictures import row_pixels
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.prompts import PromptBuilder, PromptConfig
from polyrl.rollout.chat import ChatCodec
from polyrl.tasks import get_task
from polyrl.tasks.images import rgb_image

FAMILIES = {
    "idefics3": (save_idefics3, {}),
    "qwen2_vl": (save_qwen2_vl, {"images": {"size": 16}}),
    "qwen2_5_vl": (lambda path: save_qwen2_vl(path, version="2.5"), {"images": {"size": 16}}),
}
TURNS = 3
"""Two zoomed observations: pictures in the prompt and after the first and second turns."""


@pytest.fixture(scope="module", params=list(FAMILIES))
def policy(request, tmp_path_factory):
    save, extra = FAMILIES[request.param]
    path = save(tmp_path_factory.mktemp(request.param) / "model")
    return load_policy(ModelConfig(path=str(path), **extra), seed=0, device=HOST)


def _prompts(policy, **images) -> PromptBuilder:
    image_input = policy.image_input
    if images:
        import dataclasses

        image_input = dataclasses.replace(image_input, **images)
    return PromptBuilder(policy.tokenizer, PromptConfig(field="question"), image_input)


def _episodes(policy, prompts=None):
    return zoom_episodes(policy, prompts or _prompts(policy), TURNS, 1, 5, 400)


@pytest.fixture(scope="module")
def episodes(policy):
    return _episodes(policy)


def test_every_observation_picture_is_in_the_episode_as_its_image_tokens_and_pixels(policy, episodes):
    trajs, _ = episodes
    images = policy.image_input
    for t in trajs:
        assert len(t.turn_spans) == TURNS
        assert isinstance(t.response_ids, ImageIds)
        assert t.response_ids.pixels.shape == (TURNS - 1, images.size, images.size, 3)
        image_tokens = [m for i, m in zip(t.response_ids, t.policy_mask) if i == images.token_id]
        assert image_tokens == [0] * (images.tokens * (TURNS - 1))  # environment tokens: never trained on


def test_each_turn_reads_exactly_the_episode_s_tokens_and_pictures_so_far(episodes):
    trajs, calls = episodes
    for turn in range(1, TURNS):
        for t, read in zip(trajs, calls[turn][0]):
            start = t.turn_spans[turn][0]
            assert list(read) == list(t.prompt_ids) + list(t.response_ids[:start])
            assert torch.equal(read.pixels, torch.cat([t.prompt_ids.pixels, t.response_ids.pixels[:turn]]))


def _rendered(policy, conversation: list[dict], pictures: int, generation_prompt: bool = True) -> str:
    images = policy.image_input
    text = policy.tokenizer.apply_chat_template(
        conversation, chat_template=images.template, tokenize=False, add_generation_prompt=generation_prompt
    )
    return images.expand(text, pictures)


def test_the_episode_is_what_the_processor_template_renders_for_the_conversation(policy):
    """The first prompt, a policy turn and a zoomed observation are the template's rendering of the whole
    conversation, each picture an image part before its message's text, expanded to its image tokens."""
    tok = policy.tokenizer
    codec = ChatCodec(_prompts(policy))
    problem = get_task("count_shapes").generate(0, "easy")
    crop = np.zeros((8, 8, 3), dtype=np.uint8)
    start = codec.start([{"role": "user", "content": problem.prompt}], [], problem)
    observation = codec.between_turns([{"role": "user", "content": "zoomed", "images": [crop]}], finished=False)
    user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": codec.content(problem)}]}
    assistant = {"role": "assistant", "content": [{"type": "text", "text": "abc"}]}
    zoomed = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "zoomed"}]}
    prompt, answered = _rendered(policy, [user], 1), _rendered(policy, [user, assistant], 1, False)
    turn = answered[len(prompt) : answered.rindex("abc") + 3]  # what the policy writes after the generation prompt
    episode = list(start) + tok(turn, add_special_tokens=False).input_ids + list(observation)
    assert episode == tok(_rendered(policy, [user, assistant, zoomed], 2), add_special_tokens=False).input_ids
    assert torch.equal(observation.pixels, policy.image_input.pixels([rgb_image(crop, "crop")]))


def test_the_training_forward_scores_every_turn_as_generation_did(policy, episodes):
    for scored, sampled in scored_and_sampled(policy.model, *episodes):
        assert torch.allclose(scored, sampled, atol=1e-5)


def test_the_training_forward_equals_the_model_s_own_forward_with_its_own_positions(policy, episodes):
    """The model's own forward, given the ids and pictures of one whole episode and nothing else, places the image
    tokens of every turn itself (Qwen2-VL: its M-RoPE positions): polyrl's scores are those."""
    trajs, _ = episodes
    t = trajs[0]
    batch = collate([(t.prompt_ids, t.response_ids)], 0, [t.policy_mask])
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy.model, batch)
        pictures = policy.model.polyrl_pictures
        inputs = pictures.pixel_inputs([row_pixels(batch.images[0])], HOST)
        if "image_grid_thw" in inputs:  # Qwen2-VL: which tokens are pictures, as its processor returns it
            inputs["mm_token_type_ids"] = (batch.input_ids == policy.image_input.token_id).int()
        logits = policy.model(input_ids=batch.input_ids, **inputs).logits.float()
    own = torch.log_softmax(logits[0, :-1], -1).gather(-1, batch.input_ids[0, 1:, None])[:, 0]
    mask = batch.loss_mask[0].bool()
    assert torch.allclose(logp[0][mask], own[mask], atol=1e-5)


def test_an_episode_showing_more_pictures_than_max_per_prompt_is_one_line(policy):
    with pytest.raises(UserError, match=r"shows 2 pictures, more than model.images.max_per_prompt \(1\)$"):
        _episodes(policy, _prompts(policy, max_images=1))
