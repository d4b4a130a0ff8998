"""An environment's observation may show a picture (a zoomed crop): a vision-language policy reads it as placeholder
tokens whose embeddings are the picture's, the episode's tokens stay exactly what generation read and produced,
and the training forward scores every policy turn as generation did."""

import numpy as np
import pytest
import torch
from zoom_env import scored_and_sampled, zoom_episodes

from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.forward.batch import ImageIds
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.prompts import PromptBuilder, PromptConfig

SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}
VISION = {"enabled": True, "image_size": 16, "patch_size": 4, "heads": 2}


@pytest.fixture(scope="module")
def policy():
    return load_policy(ModelConfig(tiny={**SMALL, "vision": VISION}), seed=0, device=HOST)


def _episodes(policy):
    """Two-turn crop-and-zoom episodes, 2 of each of 2 problems, on terse prompts."""
    prompts = PromptBuilder(policy.tokenizer, PromptConfig(field="question", style="terse"), policy.image_input)
    return zoom_episodes(policy, prompts, 2, 2, 6, 200)


def test_an_observation_picture_is_in_the_episode_as_its_placeholders_and_pixels(policy):
    trajs, _ = _episodes(policy)
    image_id = policy.model.config.image_token_id
    for t in trajs:
        assert isinstance(t.response_ids, ImageIds) and t.response_ids.pixels.shape == (1, 16, 16, 3)
        placeholders = [m for i, m in zip(t.response_ids, t.policy_mask) if i == image_id]
        assert placeholders == [0] * 16  # environment tokens: never trained on


def test_the_second_turn_reads_exactly_the_episode_s_tokens_and_pictures(policy):
    trajs, calls = _episodes(policy)
    second_turn_prompts = calls[1][0]
    for t, read in zip(trajs, second_turn_prompts):
        start = t.turn_spans[1][0]
        assert list(read) == list(t.prompt_ids) + list(t.response_ids[:start])
        assert torch.equal(read.pixels, torch.cat([t.prompt_ids.pixels, t.response_ids.pixels]))


def test_the_training_forward_scores_every_turn_as_generation_did(policy):
    for scored, sampled in scored_and_sampled(policy.model, *_episodes(policy)):
        assert torch.allclose(scored, sampled, atol=1e-5)


def test_an_observation_picture_for_a_text_policy_is_one_line(policy):
    codec_prompts = PromptBuilder(policy.tokenizer, PromptConfig(field="question"), None)
    from polyrl.rollout.chat import ChatCodec

    with pytest.raises(UserError, match="an environment message shows a picture; the policy takes text only"):
        ChatCodec(codec_prompts).between_turns([{"role": "user", "content": "x", "images": [np.zeros((4, 4))]}], True)


def test_an_episode_opens_with_the_problem_s_picture(policy):
    trajs, calls = _episodes(policy)
    image_id = policy.model.config.image_token_id
    for t, read in zip(trajs, calls[0][0]):
        assert isinstance(t.prompt_ids, ImageIds) and t.prompt_ids.count(image_id) == 16
        assert torch.equal(read.pixels, policy.image_input.pixels(t.problem.images))


def test_an_episode_keeps_each_observations_pictures_unresized_with_the_turn_they_followed(policy):
    trajs, _ = _episodes(policy)
    for t in trajs:
        (turn, (crop,)), *rest = t.observation_images
        picture = np.asarray(t.problem.images[0])
        quarter = picture[: picture.shape[0] // 2, : picture.shape[1] // 2]
        expected = quarter.repeat(2, axis=0).repeat(2, axis=1)  # the zoomed quarter, as the environment showed it
        assert turn == 1 and rest == [] and np.array_equal(np.asarray(crop), expected)
