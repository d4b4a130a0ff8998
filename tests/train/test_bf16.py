"""bf16 where it pays: ``model.autocast: auto``, the log-probs generation reports, and how far bf16 generation's
log-probs are from fp32 training's (the mismatch an RL step sees)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from polyrl.algos.objective_stats import logprob_mismatch
from polyrl.device import HOST
from polyrl.forward import collate, sequence_logprobs
from polyrl.forward import precision as precision_module
from polyrl.forward.precision import BF16_LOGPROB_TOLERANCE, resolve_autocast, set_autocast
from polyrl.policy import TransformersBackend
from polyrl.policy.generation import sample_tokens
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.policy.tiny import TinyModelConfig, build_tiny_policy

BF16_TOLERANCE = BF16_LOGPROB_TOLERANCE
"""bf16 (8 mantissa bits) generation vs fp32 training on the same 160 tokens, for the sharp random-weight tiny
model below (logits spread over tens of nats): measured mean |Δ log p| 0.071, max 0.45, mean ratio 0.997; the
bounds leave 2× headroom. SmolLM2-135M's figures are in docs/benchmarks.md."""


@pytest.fixture(scope="module")
def policy():
    """The tiny architecture with large random weights, so that its distributions are far from uniform."""
    model, tok = build_tiny_policy(seed=3)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.25)
    return model, tok


def _prompts():
    return [[7 + (3 * i + j) % 50 for j in range(5 + i)] for i in range(4) for _ in range(4)]


def _training_logprobs(model, gens):
    """The trainer's fp32 log-probs of the generated tokens, one list per completion."""
    batch = collate([(g.prompt_ids, g.completion_ids) for g in gens], 0)
    with torch.no_grad():
        logp = sequence_logprobs(model, batch, temperature=0.8)[0]
    return [logp[i, len(g.prompt_ids) - 1 : len(g.prompt_ids) - 1 + len(g.completion_ids)] for i, g in enumerate(gens)]


def _mismatch(gens, training):
    behaviour = torch.nn.utils.rnn.pad_sequence([torch.tensor(g.logprobs) for g in gens], batch_first=True)
    train = torch.nn.utils.rnn.pad_sequence(training, batch_first=True)
    mask = torch.nn.utils.rnn.pad_sequence([torch.ones(len(g.logprobs)) for g in gens], batch_first=True)
    return {k: float(v) for k, v in logprob_mismatch(behaviour, train, mask).items()}


def test_fp32_generation_reports_the_log_probs_the_trainer_computes(policy):
    model, tok = policy
    torch.manual_seed(0)
    gens = TransformersBackend(model, tok, device=HOST).generate(_prompts(), max_new_tokens=10, temperature=0.8)
    stats = _mismatch(gens, _training_logprobs(model, gens))
    assert stats["mismatch_abs_max"] < 1e-4
    assert stats["mismatch_ratio_mean"] == pytest.approx(1.0, abs=1e-4)


def test_bf16_generation_log_probs_match_fp32_training_within_tolerance(policy):
    model, tok = policy
    bf16 = copy.deepcopy(model)
    set_autocast(bf16, "bf16")
    torch.manual_seed(0)
    gens = TransformersBackend(bf16, tok, device=HOST).generate(_prompts(), max_new_tokens=10, temperature=0.8)
    stats = _mismatch(gens, _training_logprobs(model, gens))
    assert 0 < stats["mismatch_abs_mean"] < BF16_TOLERANCE["mismatch_abs_mean"], "bf16 does round, a little"
    assert stats["mismatch_abs_max"] < BF16_TOLERANCE["mismatch_abs_max"]
    assert stats["mismatch_ratio_mean"] == pytest.approx(1.0, abs=BF16_TOLERANCE["mismatch_ratio_mean"])


def test_top_p_log_probs_are_those_of_the_truncated_distribution_that_sampled():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    torch.manual_seed(0)
    seen = set()
    for _ in range(50):
        token, logp = sample_tokens(logits, temperature=1.0, top_p=0.7, greedy=False)
        seen.add(int(token))
        # the nucleus is {0, 1} (mass 0.8 reaches 0.7): renormalized, p = 0.5 / 0.8 or 0.3 / 0.8
        assert float(logp) == pytest.approx(math.log([0.5, 0.3][int(token)] / 0.8), abs=1e-6)
    assert seen == {0, 1}


def test_sampling_draws_from_the_softmax_at_the_temperature():
    """Inversion of the cumulative distribution draws each token with its softmax probability: over 200,000 draws
    every frequency is within 4 standard errors of it, a zero-probability token never comes, and the reported
    log-prob is that token's."""
    logits = torch.tensor([[1.0, -0.5, float("-inf"), 2.0, 0.0, -3.0]])
    probs = torch.softmax(logits / 0.7, -1)[0]
    torch.manual_seed(5)
    draws, logp = sample_tokens(logits.expand(200_000, -1), 0.7, 1.0, False)
    freq = torch.bincount(draws, minlength=6).double() / len(draws)
    stderr = (probs.double() * (1 - probs.double()) / len(draws)).sqrt()
    assert freq[2] == 0, "a token of probability 0 is never drawn"
    assert torch.all((freq - probs.double()).abs() <= 4 * stderr + 1e-12)
    assert torch.allclose(logp, probs.log()[draws])


def test_sampling_is_reproducible_at_a_seed():
    logits = torch.randn(8, 30, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(5)
    first = sample_tokens(logits, 0.7, 0.9, False)[0]
    torch.manual_seed(5)
    assert torch.equal(sample_tokens(logits, 0.7, 0.9, False)[0], first)


def test_greedy_log_probs_are_under_the_untruncated_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    token, logp = sample_tokens(logits, temperature=1.0, top_p=0.5, greedy=True)
    assert int(token) == 0
    assert float(logp) == pytest.approx(float(torch.log_softmax(logits, -1)[0, 0]))


def test_mismatch_statistics_by_hand():
    behaviour = torch.tensor([[-1.0, -2.0, -3.0]])
    training = torch.tensor([[-1.5, -2.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the third token is padding
    stats = logprob_mismatch(behaviour, training, mask)
    assert float(stats["mismatch_abs_mean"]) == pytest.approx(0.25)
    assert float(stats["mismatch_abs_max"]) == pytest.approx(0.5)
    assert float(stats["mismatch_ratio_mean"]) == pytest.approx((math.exp(-0.5) + 1.0) / 2)


def _wide(width: int):
    return build_tiny_policy(TinyModelConfig(hidden_size=width, intermediate_size=16, num_layers=1, num_heads=8))[0]


def test_auto_keeps_the_tiny_default_in_fp32(monkeypatch):
    monkeypatch.setattr(precision_module, "bf16_cpu_flags", lambda: frozenset({"amx_bf16"}))
    assert resolve_autocast("auto", build_tiny_policy()[0], "cpu") == "none"
    assert load_policy(ModelConfig(), device=HOST).model.polyrl_autocast is None


def test_auto_picks_bf16_for_a_wide_model_on_a_cpu_with_bf16_units(monkeypatch):
    wide = _wide(precision_module.AUTO_BF16_MIN_WIDTH)
    monkeypatch.setattr(precision_module, "bf16_cpu_flags", lambda: frozenset({"avx512_bf16"}))
    assert resolve_autocast("auto", wide, "cpu") == "bf16"
    monkeypatch.setattr(precision_module, "bf16_cpu_flags", lambda: frozenset())
    assert resolve_autocast("auto", wide, "cpu") == "none", "emulated bf16 is slower than fp32"


def test_auto_leaves_bf16_weights_and_explicit_modes_alone(monkeypatch):
    monkeypatch.setattr(precision_module, "bf16_cpu_flags", lambda: frozenset({"amx_bf16"}))
    wide = _wide(precision_module.AUTO_BF16_MIN_WIDTH)
    assert resolve_autocast("auto", wide.to(torch.bfloat16), "cpu") == "none"
    assert resolve_autocast("none", wide, "cpu") == "none"
    assert resolve_autocast("bf16", build_tiny_policy()[0], "cpu") == "bf16"


def _bf16_update(policy, behaviour: bool):
    """One update of the random tiny model under bf16 autocast on 16 completions it generated (rewards 0/1
    alternating), with the generation's log-probs as behaviour log-probs or without."""
    from polyrl.learner.settings import UpdateSettings
    from polyrl.learner.update import policy_update
    from polyrl.learner.update_batch import prepare_update
    from polyrl.rollout import Trajectory
    from polyrl.tasks import Problem, Verdict
    from polyrl.train.config import RLConfig

    model, tok = copy.deepcopy(policy[0]), policy[1]
    set_autocast(model, "bf16")
    torch.manual_seed(0)
    gens = TransformersBackend(model, tok, device=HOST).generate(_prompts(), max_new_tokens=8, temperature=0.8)
    problem = Problem("a", "q", "q", None, None, 0, "train", 0.0, {})
    trajs = [Trajectory.from_generation(problem, g, group=k // 4, behaviour=behaviour) for k, g in enumerate(gens)]
    for k, t in enumerate(trajs):
        t.reward, t.verdict = float(k % 2), Verdict(float(k % 2), k % 2 == 1, "")
    settings = UpdateSettings.from_config(RLConfig(temperature=0.8), tis_cap=2.0 if behaviour else None)
    batch = prepare_update(trajs, ["a"], tok.pad_token_id, settings)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return policy_update(model, optimizer, batch, settings, list(model.parameters()), device=HOST)


def test_a_bf16_update_reports_the_behaviour_training_mismatch(policy):
    stats = _bf16_update(policy, behaviour=True).objective
    assert 0 < stats["mismatch_abs_mean"] <= stats["mismatch_abs_max"] < BF16_TOLERANCE["mismatch_abs_max"]
    assert stats["mismatch_ratio_mean"] == pytest.approx(1.0, abs=BF16_TOLERANCE["mismatch_ratio_mean"])
    assert stats["tis_weight_mean"] == pytest.approx(stats["mismatch_ratio_mean"], abs=0.05), "TIS corrects it"


def test_without_behaviour_log_probs_the_update_reports_no_mismatch(policy):
    assert not {"mismatch_abs_mean", "tis_weight_mean"} & set(_bf16_update(policy, behaviour=False).objective)


def test_only_autocast_generation_hands_its_log_probs_to_the_update(policy):
    """fp32 generation and training agree to ~1e-6: the default job's update stays as it was (no TIS)."""
    model, tok = policy
    assert TransformersBackend(model, tok, device=HOST).behaviour_logprobs is False
    bf16 = copy.deepcopy(model)
    set_autocast(bf16, "bf16")
    assert TransformersBackend(bf16, tok, device=HOST).behaviour_logprobs is True


def test_large_models_step_with_fused_adamw_and_the_tiny_default_keeps_foreach():
    from polyrl.optim import FUSED_ADAMW_MIN_PARAMS, make_optimizer

    large = [torch.nn.Parameter(torch.zeros(FUSED_ADAMW_MIN_PARAMS))]
    assert make_optimizer(large, 1e-3, 0, 10, False, 0.0)[0].defaults["fused"] is True
    tiny = list(build_tiny_policy()[0].parameters())
    assert not make_optimizer(tiny, 1e-3, 0, 10, False, 0.0)[0].defaults["fused"]


@pytest.mark.parametrize("autocast", ["none", "bf16"])
def test_single_turn_rollouts_carry_behaviour_log_probs_only_under_autocast(policy, autocast):
    from polyrl.policy.prompts import PromptBuilder, PromptConfig
    from polyrl.rollout import rollout_problems
    from polyrl.tasks import get_task

    model, tok = copy.deepcopy(policy[0]), policy[1]
    set_autocast(model, autocast)
    task = get_task("addition")
    problems = [task.generate(seed, "easy") for seed in range(2)]
    prompts = PromptBuilder(tok, PromptConfig(field="question"))
    backend = TransformersBackend(model, tok, device=HOST)
    trajs = [
        t for group in rollout_problems(problems, backend, prompts, 3, 6, temperature=1.0, top_p=0.9) for t in group
    ]
    if autocast == "none":
        assert all(t.behaviour_logprobs is None for t in trajs)
    else:
        assert all(len(t.behaviour_logprobs) == len(t.response_ids) for t in trajs)
        assert all(lp <= 0 for t in trajs for lp in t.behaviour_logprobs)


def test_ray_workers_behaviour_log_probs_under_top_p_are_the_samplers(policy):
    # a Ray worker re-scores its rollouts with a forward pass: with rl.top_p < 1 that must be the nucleus
    # distribution the tokens were drawn from (renormalized), as the sampler reported, not the plain softmax
    from types import SimpleNamespace

    from polyrl.distributed.workers import behaviour_logprobs

    model, tok = policy
    torch.manual_seed(0)
    gens = TransformersBackend(model, tok, device=HOST).generate(
        _prompts(), max_new_tokens=10, temperature=0.8, top_p=0.6
    )
    trajs = [
        SimpleNamespace(
            prompt_ids=g.prompt_ids,
            response_ids=g.completion_ids,
            policy_version=0,
            turn_versions=None,
            turn_spans=None,
        )
        for g in gens
    ]
    behaviour_logprobs({0: model}, HOST, trajs, 0, 0.8, 0.6)
    for t, g in zip(trajs, gens):
        assert t.behaviour_logprobs == pytest.approx(g.logprobs, abs=1e-4)
    plain = _training_logprobs(model, gens)  # the untruncated softmax: lower wherever the nucleus cut mass off
    gaps = [b - p for t, pl in zip(trajs, plain) for b, p in zip(t.behaviour_logprobs, pl.tolist())]
    assert min(gaps) > -1e-4 and max(gaps) > 0.05
