"""What FSDP's shards of the tiny vision-language model score with: the model's own forward, which embeds the pictures
of a batch as polyrl's packed forward does (a shard cannot take the packed forward: its layers gather their weights
in their own forward hooks), and the idle pass that keeps ranks in step on a batch with pictures."""

import pytest
import torch

from polyrl.device import HOST
from polyrl.forward import collate, sequence_logprobs
from polyrl.forward.batch import join
from polyrl.forward.logprobs import _plain_logprobs
from polyrl.learner.ranks import idle_pass
from polyrl.policy import PromptBuilder, load_policy
from polyrl.policy.loading import ModelConfig
from polyrl.policy.prompts import PromptConfig
from polyrl.tasks import get_task

VLM = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}
VISION = {"enabled": True, "image_size": 16, "heads": 2}


@pytest.fixture(scope="module")
def policy():
    return load_policy(ModelConfig(tiny={**VLM, "vision": VISION}), seed=0, device=HOST)


class OwnForward(torch.nn.Module):
    """The policy behind a module whose logits ``sequence_logprobs`` cannot split from its trunk and whose decoder
    the packed forward cannot take (as a shard's): scoring takes the model's own forward, as under FSDP."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config = model, model.config

    def forward(self, **kwargs):
        return self.inner(**kwargs)


def _batch(policy):
    """Three prompts with a picture each, and an episode row whose response shows another (an observation)."""
    prompts = PromptBuilder(policy.tokenizer, PromptConfig(field="question"), policy.image_input)
    problems = [get_task("count_shapes").generate(s, "easy") for s in range(3)]
    rows = [(prompts.ids(p), [5, 6, 7, 8][: 2 + i]) for i, p in enumerate(problems)]
    shown = policy.image_input.placeholders(1)
    observation = policy.image_input.prompt(
        policy.tokenizer(shown, add_special_tokens=False).input_ids + [9], problems[0].images
    )
    rows.append((prompts.ids(problems[1]), join([5, 6], observation)))
    return rows, collate(rows, policy.tokenizer.pad_token_id)


def test_the_model_s_own_forward_scores_pictures_as_the_packed_forward(policy):
    rows, batch = _batch(policy)
    with torch.no_grad():
        packed, _ = sequence_logprobs(policy.model, batch, share_prompts=False)
        own, _ = sequence_logprobs(OwnForward(policy.model), batch)
    for i, (prompt, response) in enumerate(rows):
        span = slice(len(prompt) - 1, len(prompt) - 1 + len(response))
        torch.testing.assert_close(own[i, span], packed[i, span])


def test_the_model_s_own_forward_reads_the_pictures(policy):
    _, batch = _batch(policy)
    blank = [(torch.zeros_like(row[0]), row[1], row[2]) for row in batch.images]
    blanked = type(batch)(batch.input_ids, batch.attention_mask, batch.loss_mask, batch.prompt_lengths, blank)
    with torch.no_grad():
        seen, _ = _plain_logprobs(OwnForward(policy.model), batch, 1.0, False, False)
        unseen, _ = _plain_logprobs(OwnForward(policy.model), blanked, 1.0, False, False)
    assert not torch.allclose(seen, unseen)


def test_a_model_that_takes_text_only_refuses_a_batch_with_pictures(policy):
    text = load_policy(ModelConfig(tiny=VLM), seed=0, device=HOST)
    _, batch = _batch(policy)
    with pytest.raises(ValueError, match="scored on polyrl's packed forward only"):
        sequence_logprobs(OwnForward(text.model), batch)


def test_the_idle_pass_runs_on_a_batch_with_pictures_and_trains_nothing(policy):
    _, batch = _batch(policy)
    policy.model.zero_grad(set_to_none=True)
    idle_pass(policy.model, batch.input_ids, HOST, backward=True)
    grads = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert grads and all(float(g.abs().max()) == 0 for g in grads)
