"""Policy losses against hand-computed numbers: the clipped surrogate with decoupled clip range, loss
aggregations, truncated importance sampling, KL estimators and DAPO's overlong penalty."""

import math

import pytest
import torch

from polyrl import UserError
from polyrl.algos import (
    AGGREGATIONS,
    RowStat,
    aggregate,
    get_aggregation,
    kl_penalty,
    loss_totals,
    overlong_penalty,
    policy_loss,
    register_aggregation,
)

LN2 = math.log(2.0)


def close(actual, expected, atol=1e-5):
    actual = actual.over() if isinstance(actual, RowStat) else actual  # an objective's statistic
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# policy_loss has no defaults of its own (they live in RLConfig); these tests pick symmetric PPO.
PPO = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "aggregation": "token_mean"}


def ppo(logprobs, old_logprobs, advantages, mask, **kwargs):
    return policy_loss(logprobs, old_logprobs, advantages, mask, **(PPO | kwargs))


def single_token(ratio: float, advantage: float, **kwargs):
    """policy_loss on one token whose ratio to the old policy is ``ratio``; returns (loss, stats, grad)."""
    logprobs = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, stats = ppo(logprobs, torch.zeros(1, 1), torch.tensor([advantage]), torch.ones(1, 1), **kwargs)
    loss.backward()
    return loss, stats, logprobs.grad


# --- clipped surrogate -------------------------------------------------------------------------------------


def test_ratio_one_gives_minus_advantage_and_its_gradient():
    loss, stats, grad = single_token(1.0, 2.0)
    close(loss, -2.0)
    close(grad, [[-2.0]])  # d/dlogp of -A * exp(logp - old) at ratio 1
    close(stats["clip_fraction"], 0.0)
    close(stats["approx_kl"], 0.0)


def test_positive_advantage_above_clip_high_has_zero_gradient():
    loss, stats, grad = single_token(1.5, 1.0, clip_ratio_high=0.28)
    close(loss, -1.28)
    close(grad, [[0.0]])
    close(stats["clip_fraction"], 1.0)
    close(stats["clip_fraction_high"], 1.0)
    close(stats["clip_fraction_low"], 0.0)


def test_negative_advantage_above_clip_high_is_not_clipped():
    # the pessimistic min keeps the unclipped branch: loss = -A * r, gradient = -A * r
    loss, stats, grad = single_token(1.5, -1.0, clip_ratio_high=0.28)
    close(loss, 1.5)
    close(grad, [[1.5]])
    close(stats["clip_fraction"], 0.0)


def test_negative_advantage_below_clip_low_has_zero_gradient():
    loss, stats, grad = single_token(0.5, -1.0, clip_ratio_low=0.2)
    close(loss, 0.8)
    close(grad, [[0.0]])
    close(stats["clip_fraction_low"], 1.0)


def test_clip_high_is_decoupled_from_clip_low():
    _, symmetric, _ = single_token(1.25, 1.0, clip_ratio_low=0.2, clip_ratio_high=0.2)
    _, clip_higher, grad = single_token(1.25, 1.0, clip_ratio_low=0.2, clip_ratio_high=0.28)
    close(symmetric["clip_fraction"], 1.0)
    close(clip_higher["clip_fraction"], 0.0)
    close(grad, [[-1.25]])


def test_per_sequence_advantages_broadcast_over_tokens():
    torch.manual_seed(0)
    logprobs, old = torch.randn(2, 3), torch.randn(2, 3)
    advantages, mask = torch.tensor([1.0, -2.0]), torch.ones(2, 3)
    per_sequence, _ = ppo(logprobs, old, advantages, mask)
    per_token, _ = ppo(logprobs, old, advantages[:, None].expand(2, 3), mask)
    close(per_sequence, per_token)


def test_padding_tokens_neither_change_the_loss_nor_receive_gradient():
    logprobs = torch.tensor([[0.1, -0.2, 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, stats = ppo(logprobs, torch.zeros(1, 3), torch.tensor([1.0]), mask, clip_ratio_high=10.0)
    loss.backward()
    close(loss, -(math.exp(0.1) + math.exp(-0.2)) / 2)
    assert logprobs.grad[0, 2] == 0.0
    close(stats["ratio_max"], math.exp(0.1))


def test_on_policy_call_with_the_same_tensor_still_has_a_gradient():
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = ppo(logprobs, logprobs, torch.tensor([1.0]), torch.ones(1, 2))
    loss.backward()
    close(logprobs.grad, [[-0.5, -0.5]])


def test_approx_kl_is_k3_of_the_ratio():
    _, stats, _ = single_token(2.0, 1.0, clip_ratio_high=5.0)
    close(stats["approx_kl"], 2.0 - 1.0 - LN2)
    close(stats["ratio_mean"], 2.0)


@pytest.mark.parametrize("low, high", [(-0.1, 0.2), (1.0, 0.2), (float("nan"), 0.2), (0.2, -0.1), (0.2, float("nan"))])
def test_bad_clip_ratios_are_user_errors(low, high):
    with pytest.raises(UserError, match="clip_ratio"):
        single_token(1.0, 1.0, clip_ratio_low=low, clip_ratio_high=high)


# --- aggregations ---------------------------------------------------------------------------------------------

# two sequences of unequal length: token values [1, 2, 3] and [4]
VALUES = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


def test_token_mean_weighs_every_token_equally():
    close(aggregate(VALUES, MASK, "token_mean"), (1 + 2 + 3 + 4) / 4)


def test_seq_mean_token_mean_weighs_every_sequence_equally():
    close(aggregate(VALUES, MASK, "seq_mean_token_mean"), (2.0 + 4.0) / 2)


def test_seq_mean_token_sum_norm_divides_by_a_constant_budget():
    close(aggregate(VALUES, MASK, "seq_mean_token_sum_norm", max_tokens=4), (6 / 4 + 4 / 4) / 2)


def test_seq_mean_token_mean_skips_sequences_without_tokens():
    close(aggregate(VALUES, torch.tensor([[1, 1, 1], [0, 0, 0]]), "seq_mean_token_mean"), 2.0)


def test_seq_mean_token_sum_norm_skips_sequences_without_tokens():
    close(aggregate(VALUES, torch.tensor([[1, 1, 1], [0, 0, 0]]), "seq_mean_token_sum_norm", max_tokens=4), 6 / 4)


def test_loss_totals_count_tokens_and_sequences_with_tokens():
    tokens, sequences = loss_totals(torch.tensor([[1, 1, 1], [0, 0, 0], [1, 0, 0]]))
    close(tokens, 4)
    close(sequences, 2)


@pytest.mark.parametrize(
    "aggregation, totals, expected",
    [
        ("token_mean", {"total_tokens": 8}, 10 / 8),  # this batch's 4 tokens of a minibatch of 8
        ("seq_mean_token_mean", {"total_sequences": 4}, (2.0 + 4.0) / 4),
        ("seq_mean_token_sum_norm", {"total_sequences": 4}, (6 / 4 + 4 / 4) / 4),
    ],
)
def test_minibatch_totals_replace_the_batch_own_counts(aggregation, totals, expected):
    close(aggregate(VALUES, MASK, aggregation, max_tokens=4, **totals), expected)


@pytest.mark.parametrize(
    "aggregation, expected", [("token_mean", 2.5), ("seq_mean_token_mean", 3.0), ("seq_mean_token_sum_norm", 1.25)]
)
def test_policy_loss_uses_the_named_aggregation(aggregation, expected):
    # at ratio 1 the token loss is -A, so advantages -VALUES give token losses VALUES
    loss, _ = ppo(torch.zeros(2, 3), torch.zeros(2, 3), -VALUES, MASK, aggregation=aggregation, max_tokens=4)
    close(loss, expected)


def test_token_sum_norm_without_budget_is_a_user_error():
    with pytest.raises(UserError, match="max_tokens"):
        aggregate(VALUES, MASK, "seq_mean_token_sum_norm")


def test_unknown_aggregation_is_a_user_error_listing_known_names():
    with pytest.raises(UserError, match=r"unknown loss aggregation 'sum'.*token_mean"):
        ppo(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1), aggregation="sum")


def test_register_aggregation_adds_a_named_aggregation():
    @register_aggregation("token_sum_for_test")
    def token_sum(values, mask, max_tokens, total_tokens, total_sequences):
        return (values * mask).sum()

    try:
        assert get_aggregation("token_sum_for_test") is token_sum
        close(aggregate(VALUES, MASK, "token_sum_for_test"), 10.0)
    finally:
        del AGGREGATIONS["token_sum_for_test"]


# --- truncated importance sampling ----------------------------------------------------------------------------


def test_tis_weight_is_truncated_at_the_cap_and_scales_loss_and_gradient():
    logprobs = torch.zeros(1, 2, requires_grad=True)
    old = torch.zeros(1, 2)
    behaviour = torch.tensor([[-math.log(3.0), -math.log(1.5)]])  # weights exp(old - behaviour) = 3, 1.5
    loss, stats = ppo(logprobs, old, torch.tensor([1.0]), torch.ones(1, 2), behaviour_logprobs=behaviour, tis_cap=2.0)
    loss.backward()
    close(loss, -(2.0 + 1.5) / 2)
    close(logprobs.grad, [[-1.0, -0.75]])
    close(stats["tis_weight_mean"], 1.75)
    close(stats["tis_truncated_fraction"], 0.5)


def test_tis_weight_carries_no_gradient_to_behaviour_logprobs():
    logprobs = torch.zeros(1, 1, requires_grad=True)
    behaviour = torch.full((1, 1), -1.0, requires_grad=True)
    loss, _ = ppo(
        logprobs, torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1), behaviour_logprobs=behaviour, tis_cap=5.0
    )
    loss.backward()
    assert behaviour.grad is None
    close(logprobs.grad, [[-math.e]])  # weight exp(0 - (-1)) = e scales the gradient -A * r = -1


def test_tis_cap_without_behaviour_logprobs_is_a_bug():
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        single_token(1.0, 1.0, tis_cap=2.0)


def test_nonpositive_tis_cap_is_a_user_error():
    with pytest.raises(UserError, match="tis_cap"):
        single_token(1.0, 1.0, tis_cap=0.0, behaviour_logprobs=torch.zeros(1, 1))


# --- KL penalty -------------------------------------------------------------------------------------------------


def test_kl_estimators_hand_values():
    logprobs, ref = torch.zeros(1, 1), torch.full((1, 1), LN2)
    close(kl_penalty(logprobs, ref, "k1"), [[-LN2]])
    close(kl_penalty(logprobs, ref, "k2"), [[0.5 * LN2**2]])
    close(kl_penalty(logprobs, ref, "k3"), [[2.0 - LN2 - 1.0]])


def test_k3_is_nonnegative_and_zero_when_policies_agree():
    torch.manual_seed(0)
    logprobs, ref = torch.randn(4, 16), torch.randn(4, 16)
    assert (kl_penalty(logprobs, ref, "k3") >= 0).all()
    close(kl_penalty(logprobs, logprobs, "k3"), torch.zeros(4, 16))


def test_k1_and_k3_are_unbiased_estimates_of_kl_under_the_policy():
    p = torch.tensor([0.5, 0.3, 0.2])
    ref = torch.tensor([0.2, 0.2, 0.6])
    exact = (p * (p / ref).log()).sum()
    for estimator in ("k1", "k3"):
        close((p * kl_penalty(p.log(), ref.log(), estimator)).sum(), exact)


def test_k3_gradient_pushes_logprob_towards_reference():
    logprobs = torch.zeros(1, 1, requires_grad=True)
    kl_penalty(logprobs, torch.full((1, 1), LN2), "k3").sum().backward()
    close(logprobs.grad, [[1.0 - 2.0]])  # d/dlogp = 1 - exp(ref - logp)


def test_k3_stays_finite_for_vanishing_policy_probability():
    assert torch.isfinite(kl_penalty(torch.tensor([[-200.0]]), torch.zeros(1, 1), "k3")).all()


def test_unknown_kl_estimator_is_a_user_error():
    with pytest.raises(UserError, match=r"unknown KL estimator 'k4'.*k3"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k4")


# --- overlong penalty ---------------------------------------------------------------------------------------------


def test_overlong_penalty_is_zero_then_linear_then_constant():
    lengths = torch.tensor([10, 16, 17, 18, 20, 21, 100])
    close(overlong_penalty(lengths, max_len=20, cache_len=4), [0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0])


def test_overlong_penalty_scales_with_factor():
    close(overlong_penalty(torch.tensor([18, 30]), max_len=20, cache_len=4, factor=0.5), [-0.25, -0.5])


def test_overlong_penalty_without_cache_is_a_hard_step():
    close(overlong_penalty(torch.tensor([20, 21]), max_len=20, cache_len=0), [0.0, -1.0])


@pytest.mark.parametrize("max_len, cache_len", [(20, 21), (20, -1), (0, 0)])
def test_bad_overlong_lengths_are_user_errors(max_len, cache_len):
    with pytest.raises(UserError, match="overlong"):
        overlong_penalty(torch.tensor([1]), max_len=max_len, cache_len=cache_len)
