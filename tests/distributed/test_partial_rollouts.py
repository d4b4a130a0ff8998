"""Interruptible generation: an episode switches to new weights between turns; each turn keeps the behaviour
log-probs of the weights that generated it."""

import pytest
import torch
from rollout_sampling import sampling

from polyrl.device import HOST
from polyrl.distributed.workers import behaviour_logprobs
from polyrl.envs import get_env_task
from polyrl.forward import collate, sequence_logprobs
from polyrl.policy import load_policy
from polyrl.policy.generation import Generation
from polyrl.policy.loading import ModelConfig
from polyrl.rollout import rollout
from polyrl.rollout.episodes import rollout_episodes
from polyrl.tasks import get_task

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 1, "num_heads": 2}


class Scripted:
    """A generation backend that answers from a script: ``script(prompt_text) -> reply``."""

    def __init__(self, tokenizer, script):
        self.tok, self.script = tokenizer, script

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False):
        out = []
        for p in prompts:
            ids = self.tok(self.script(self.tok.decode(p)), add_special_tokens=False).input_ids
            ids = (ids + [self.tok.eos_token_id])[:max_new_tokens]
            out.append(Generation(list(p), ids, self.tok.decode(ids, skip_special_tokens=True), True))
        return out


@pytest.fixture
def scripted(tiny_tokenizer):  # this file's backend always reports a finished reply (the shared one records more)
    return lambda script: Scripted(tiny_tokenizer, script)


def wrong_then_right(prompt_text):
    """First attempt wrong, second (after the retry prompt) right."""
    question = prompt_text.split("<|user|>")[1].split("<|assistant|>")[0]
    a, b = question.rstrip("=").split("+")
    return f"<answer>{int(a) + int(b) + (0 if prompt_text.count('<|assistant|>') > 1 else 1)}</answer>"


def _retry_episode(prompts, backend, **versions):
    """The one episode of ``env/retry:addition`` on problem 0 that ``backend`` plays (40 new tokens a turn), with
    ``versions`` (``version`` or ``latest``: which weights generate each turn)."""
    task = get_env_task("env/retry:addition")
    (t,) = rollout_episodes(
        [task.generate(0, "easy")], {task.name: task}, backend, prompts, 1, 40, temperature=1.0, top_p=1.0, **versions
    )
    return t


def test_each_turn_is_generated_by_the_newest_weights_and_the_episode_is_as_old_as_its_first_turn(prompts, scripted):
    backend = scripted(wrong_then_right)
    versions = iter([3, 4])
    t = _retry_episode(prompts, backend, latest=lambda: (backend, next(versions)))
    assert t.info["turns"] == 2 and t.verdict.correct
    assert t.turn_versions == [3, 4] and t.policy_version == 3


def test_without_interruption_every_turn_has_the_requested_version(prompts, scripted):
    t = _retry_episode(prompts, scripted(wrong_then_right), version=5)
    assert t.turn_versions == [5, 5] and t.policy_version == 5


def test_single_turn_groups_take_the_newest_weights_when_they_start(prompts, scripted):
    backend = scripted(lambda _: "<answer>1</answer>")
    task = get_task("addition")
    trajs = rollout(
        [task.generate(0, "easy")], {"addition": task}, None, prompts, sampling(2, 20), latest=lambda: (backend, 7)
    )
    assert [t.policy_version for t in trajs] == [7, 7]


def _logprobs(model, t, tok):
    batch = collate([(t.prompt_ids, t.response_ids)], tok.pad_token_id)
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, batch, 1.0)
    start = len(t.prompt_ids) - 1
    return logp[0, start : start + len(t.response_ids)]


def test_behaviour_logprobs_of_a_partial_rollout_come_from_each_turns_weights(prompts, scripted, tiny_tokenizer):
    old = load_policy(ModelConfig(path="tiny", tiny=TINY), seed=0, device=HOST).model.eval()
    new = load_policy(ModelConfig(path="tiny", tiny=TINY), seed=1, device=HOST).model.eval()
    backend = scripted(wrong_then_right)
    versions = iter([0, 1])
    t = _retry_episode(prompts, backend, latest=lambda: (backend, next(versions)))
    behaviour_logprobs({0: old, 1: new}, HOST, [t], tiny_tokenizer.pad_token_id, 1.0, 1.0)
    got = torch.tensor(t.behaviour_logprobs)
    (a0, b0), (a1, b1) = t.turn_spans
    torch.testing.assert_close(got[a0:b0], _logprobs(old, t, tiny_tokenizer)[a0:b0])
    torch.testing.assert_close(got[a1:b1], _logprobs(new, t, tiny_tokenizer)[a1:b1])
    assert not torch.allclose(_logprobs(old, t, tiny_tokenizer)[a1:b1], got[a1:b1])  # the models differ
    assert len(t.behaviour_logprobs) == len(t.response_ids)
