"""An environment's observation may show a picture (a zoomed crop): a vision-language policy reads it as placeholder
tokens whose embeddings are the picture's, the episode's tokens stay exactly what generation read and produced,
and the training forward scores every policy turn as generation did."""

import numpy as np
import pytest
import torch

from polyrl.device import HOST
from polyrl.envs.environment import Environment, StepResult
from polyrl.envs.wrapped import WrappedTask
from polyrl.errors import UserError
from polyrl.forward.batch import ImageIds, collate
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.policy.generation import TransformersBackend
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.prompts import PromptBuilder, PromptConfig
from polyrl.rollout.episodes import rollout_episodes
from polyrl.tasks import get_task

SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}
VISION = {"enabled": True, "image_size": 16, "patch_size": 4, "heads": 2}


class ZoomEnvironment(Environment):
    """First turn: any text, answered with the top-left quarter of the picture; second turn: the answer."""

    def reset(self):
        return [{"role": "user", "content": self.problem.prompt}]

    def step(self, action):
        self.turn += 1
        if self.turn == 1:
            pixels = np.asarray(self.problem.images[0])
            crop = pixels[: pixels.shape[0] // 2, : pixels.shape[1] // 2]
            return StepResult([{"role": "user", "content": "zoomed", "images": [crop]}], 0.0, False)
        return self.end(0.0, False, 0.0, "answered")


class ZoomTask(WrappedTask):
    name = "zoom:count_shapes"

    def make_env(self, problem):
        return ZoomEnvironment(problem, self.max_turns)


class Recording:
    """A backend that keeps what each generate call read and returned."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, prompts, **kwargs):
        gens = self.inner.generate(prompts, **kwargs)
        self.calls.append((list(prompts), gens))
        return gens


@pytest.fixture(scope="module")
def policy():
    return load_policy(ModelConfig(tiny={**SMALL, "vision": VISION}), seed=0, device=HOST)


def _episodes(policy, images=True):
    task = ZoomTask(get_task("count_shapes"), 2)
    prompts = PromptBuilder(
        policy.tokenizer, PromptConfig(field="question", style="terse"), policy.image_input if images else None
    )
    backend = Recording(TransformersBackend(policy.model, policy.tokenizer, device=HOST))
    problems = [task.generate(s, "easy") for s in range(2)]
    torch.manual_seed(0)
    trajs = rollout_episodes(problems, {task.name: task}, backend, prompts, 2, 6, 200, temperature=1.0, top_p=1.0)
    return trajs, backend.calls


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
    trajs, calls = _episodes(policy)
    batch = collate([(t.prompt_ids, t.response_ids) for t in trajs], 0, [t.policy_mask for t in trajs])
    with torch.no_grad():
        logp, _ = sequence_logprobs(policy.model, batch)
    for i in range(len(trajs)):  # every episode lives both turns: row i of each call is episode i
        sampled = [lp for _, gens in calls for lp in gens[i].logprobs]
        assert torch.allclose(logp[i][batch.loss_mask[i].bool()], torch.tensor(sampled), atol=1e-5)


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
