"""The two compute savers of the RL step give the same numbers as the plain computation.

- Generation: each distinct prompt is prefilled once and finished rows leave the batch
  (``TransformersBackend(shared_prefill=True)``) — same tokens as ``model.generate`` under greedy decoding.
- Update: rows that share a prompt reuse one forward of it (``sequence_logprobs(share_prompts=True)``) —
  same log-probs, entropies and gradients as one forward over the padded batch.
"""

from __future__ import annotations

import copy
import random
from collections import Counter

import pytest
import torch

from polyrl.device import HOST
from polyrl.forward import collate, sequence_logprobs
from polyrl.forward.decoder import set_forward
from polyrl.policy import TransformersBackend
from polyrl.policy.tiny import build_tiny_policy


@pytest.fixture(scope="module")
def policy():
    """The tiny architecture with large random weights: an untrained tiny model repeats one token forever,
    this one emits varied tokens (and EOS at varied steps), which exercises the decoding bookkeeping."""
    model, tok = build_tiny_policy(seed=3)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.25)
    return model, tok


@pytest.fixture(scope="module")
def tiny():
    return build_tiny_policy(seed=3)


def grouped_prompts(n_groups: int, group_size: int, seed: int = 0, lengths=(3, 30)) -> list[list[int]]:
    rnd = random.Random(seed)
    prompts = [[rnd.randrange(5, 60) for _ in range(rnd.randint(*lengths))] for _ in range(n_groups)]
    return [p for p in prompts for _ in range(group_size)]


def frequent_tokens(gens, k: int = 3) -> list[int]:
    """Tokens greedy decoding emits often: used as extra EOS tokens so that rows end at different steps."""
    return [t for t, _ in Counter(t for g in gens for t in g.completion_ids[1:]).most_common(k)]


def test_shared_prefill_greedy_matches_model_generate(policy):
    model, tok = policy
    flat = grouped_prompts(6, 3)
    fast, plain = (
        TransformersBackend(model, tok, device=HOST),
        TransformersBackend(model, tok, shared_prefill=False, device=HOST),
    )
    assert [g.completion_ids for g in fast.generate(flat, max_new_tokens=20, greedy=True)] == [
        g.completion_ids for g in plain.generate(flat, max_new_tokens=20, greedy=True)
    ]


def test_rows_that_stop_early_leave_the_batch_without_changing_the_others(policy):
    model, tok = policy
    flat = grouped_prompts(8, 2, seed=1)
    fast, plain = (
        TransformersBackend(model, tok, device=HOST),
        TransformersBackend(model, tok, shared_prefill=False, device=HOST),
    )
    stops = frequent_tokens(plain.generate(flat, max_new_tokens=20, greedy=True)) + [tok.eos_token_id]
    fast._eos = plain._eos = stops
    a = fast.generate(flat, max_new_tokens=20, greedy=True)
    b = plain.generate(flat, max_new_tokens=20, greedy=True)
    assert [g.completion_ids for g in a] == [g.completion_ids for g in b]
    assert [g.finished for g in a] == [g.finished for g in b]
    lengths = {len(g.completion_ids) for g in a}
    assert len(lengths) > 2, "the test needs rows that end at different steps"
    for g in a:
        assert g.finished == (g.completion_ids[-1] in stops)
        assert not set(stops) & set(g.completion_ids[:-1])


def test_chunks_split_groups_and_keep_the_order(policy):
    model, tok = policy
    flat = grouped_prompts(5, 3, seed=2)
    small = TransformersBackend(model, tok, batch_size=4, device=HOST)  # chunk boundaries cut through groups
    whole = TransformersBackend(model, tok, device=HOST)
    a = small.generate(flat, max_new_tokens=8, greedy=True)
    b = whole.generate(flat, max_new_tokens=8, greedy=True)
    assert [g.prompt_ids for g in a] == flat
    assert [g.completion_ids for g in a] == [g.completion_ids for g in b]


def test_sampling_is_seeded_and_top_p_near_zero_is_greedy(policy):
    model, tok = policy
    flat = grouped_prompts(4, 4, seed=3)
    backend = TransformersBackend(model, tok, device=HOST)
    torch.manual_seed(7)
    first = [g.completion_ids for g in backend.generate(flat, max_new_tokens=12, temperature=1.0)]
    torch.manual_seed(7)
    again = [g.completion_ids for g in backend.generate(flat, max_new_tokens=12, temperature=1.0)]
    assert first == again
    assert len({tuple(c) for c in first}) > len(set(map(tuple, flat))), "a group's samples differ from each other"
    nucleus = [g.completion_ids for g in backend.generate(flat, max_new_tokens=12, top_p=1e-6)]
    greedy = [g.completion_ids for g in backend.generate(flat, max_new_tokens=12, greedy=True)]
    assert nucleus == greedy


def test_sampling_follows_the_model_distribution(policy):
    """First-token frequencies of the shared-prefill sampler match softmax(logits / T) of a plain forward."""
    model, tok = policy
    prompt = grouped_prompts(1, 1, seed=4)[0]
    backend = TransformersBackend(model, tok, device=HOST)
    torch.manual_seed(0)
    gens = backend.generate([prompt] * 4000, max_new_tokens=1, temperature=2.0)
    with torch.no_grad():
        probs = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1] / 2.0, -1)
    counts = Counter(g.completion_ids[0] for g in gens)
    for token, p in enumerate(probs.tolist()):
        if p > 0.05:
            assert abs(counts[token] / 4000 - p) < 0.03


def _batch(tiny, group_size: int, policy_masks: bool = False):
    _, tok = tiny
    rnd = random.Random(5)
    flat = grouped_prompts(6, group_size, seed=5, lengths=(4, 25))
    seqs = [(p, [rnd.randrange(5, 60) for _ in range(rnd.randint(1, 14))]) for p in flat]
    masks = [[rnd.random() < 0.7 for _ in r] for _, r in seqs] if policy_masks else None
    return collate(seqs, tok.pad_token_id, [[int(m) for m in ms] for ms in masks] if masks else None)


def _logprobs_and_grads(model, batch, share: bool):
    model.zero_grad(set_to_none=True)
    logp, ent = sequence_logprobs(model, batch, temperature=0.8, entropy=True, share_prompts=share)
    ((logp * batch.loss_mask).sum() / batch.loss_mask.sum().clamp(min=1)).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    return logp.detach() * batch.loss_mask, ent * batch.loss_mask, grads


@pytest.mark.parametrize("policy_masks", [False, True], ids=["single-turn", "multi-turn masks"])
def test_shared_prompt_forward_gives_the_same_logprobs_and_gradients(tiny, policy_masks):
    model, _ = tiny
    batch = _batch(tiny, 4, policy_masks)
    plain, shared = _logprobs_and_grads(model, batch, False), _logprobs_and_grads(model, batch, True)
    assert plain[0].shape == shared[0].shape == batch.loss_mask.shape
    torch.testing.assert_close(shared[0], plain[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared[1], plain[1], atol=1e-5, rtol=1e-5)
    for a, b in zip(shared[2], plain[2]):
        assert float((a - b).abs().max()) <= 1e-4 * float(b.abs().max())


def test_shared_prompt_forward_on_a_shuffled_minibatch(tiny):
    """Minibatches cut groups apart and reorder rows: each row still gets its own prompt's cache."""
    model, _ = tiny
    batch = _batch(tiny, 4)
    mb = batch.select(torch.randperm(len(batch), generator=torch.Generator().manual_seed(0))[:15])
    torch.testing.assert_close(
        _logprobs_and_grads(model, mb, True)[0], _logprobs_and_grads(model, mb, False)[0], atol=1e-5, rtol=1e-5
    )


def test_distinct_prompts_take_the_plain_path(tiny, monkeypatch):
    """On transformers' forward (the packed forward shares prompts by its layout): a batch whose prompts are all
    different is tried for sharing, declined, and scored by one padded forward."""
    model = copy.deepcopy(tiny[0])
    set_forward(model, "transformers")
    import polyrl.forward.logprobs as batch_module

    calls = []
    real = batch_module._shared_prompt_logprobs
    monkeypatch.setattr(batch_module, "_shared_prompt_logprobs", lambda *a: calls.append(1) or real(*a))
    batch = _batch(tiny, 1)
    logp, _ = sequence_logprobs(model, batch)
    assert calls == [1] and logp.shape == batch.loss_mask.shape  # tried, declined (nothing shared), plain forward
