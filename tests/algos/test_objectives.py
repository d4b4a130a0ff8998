"""Registered policy objectives against hand-computed numbers: PPO-clip, GSPO, CISPO, truncated importance
sampling, truncated-completion and off-policy sequence masks, and minibatch totals under gradient
accumulation."""

import dataclasses
import math

import pytest
import torch
from pydantic import ValidationError

from polyrl import UserError, algos
from polyrl.algos.objectives import CISPOSettings, GSPOSettings

LN2 = math.log(2.0)
SQRT2 = math.sqrt(2.0)

SETTINGS = algos.ObjectiveSettings(
    clip_ratio_low=0.2,
    clip_ratio_high=0.28,
    aggregation="token_mean",
    max_tokens=None,
    tis_cap=None,
    mask_truncated=False,
    offpolicy_kl_threshold=None,
)
OWN = {"gspo": GSPOSettings(clip_ratio_low=0.2, clip_ratio_high=0.5), "cispo": CISPOSettings(clip_ratio_high=0.5)}
"""Each objective's own settings in these tests (``settings.own``, unless a test passes its own)."""
REQUIRED_STATS = {
    "clip_fraction",
    "clip_fraction_low",
    "clip_fraction_high",
    "approx_kl",
    "ratio_mean",
    "ratio_max",
    "ratio_min",
}


def close(actual, expected, atol=1e-5):
    actual = actual.over() if isinstance(actual, algos.RowStat) else actual
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def for_(name, settings):
    """``settings`` with objective ``name``'s own settings from OWN when it carries none."""
    return settings if settings.own is not None else dataclasses.replace(settings, own=OWN.get(name))


def run(name, log_ratios, advantages, mask=None, settings=SETTINGS, **inputs):
    """Objective ``name`` at ``logprobs = log_ratios`` against ``old_logprobs = 0``; returns (loss, stats, grad)."""
    logprobs = torch.tensor(log_ratios, dtype=torch.float64, requires_grad=True)
    mask = torch.ones_like(logprobs) if mask is None else torch.tensor(mask, dtype=torch.float64)
    batch = algos.ObjectiveInputs(logprobs, torch.zeros_like(logprobs), torch.tensor(advantages), mask, **inputs)
    loss, stats = algos.get_objective(name)(batch, for_(name, settings))
    loss.backward()
    return loss, stats, logprobs.grad


def with_(**changes):
    return dataclasses.replace(SETTINGS, **changes)


# --- the registry -----------------------------------------------------------------------------------------


def test_builtin_objectives_are_registered():
    assert {"ppo_clip", "gspo", "cispo"} <= set(algos.OBJECTIVES.names())


def test_unknown_objective_is_a_user_error_with_a_suggestion():
    with pytest.raises(UserError, match=r"unknown policy objective 'gpso'.*did you mean gspo"):
        algos.get_objective("gpso")


# --- PPO-clip ---------------------------------------------------------------------------------------------


def test_policy_loss_is_ppo_clip_with_positional_tensors():
    torch.manual_seed(0)
    logprobs, old, advantages = torch.randn(2, 3), torch.randn(2, 3), torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    loss, stats = algos.policy_loss(logprobs, old, advantages, mask, 0.2, 0.28, "token_mean")
    expected_loss, expected_stats = algos.get_objective("ppo_clip")(
        algos.ObjectiveInputs(logprobs, old, advantages, mask), SETTINGS
    )
    close(loss, expected_loss)
    assert stats.keys() == expected_stats.keys()


def test_ppo_clip_clips_each_token_on_its_own():
    # ratios 2 and 1, A = 1: the first is clipped at 1 + 0.28 (no gradient), the second is not.
    loss, stats, grad = run("ppo_clip", [[LN2, 0.0]], [1.0])
    close(loss, -(1.28 + 1.0) / 2)
    close(grad, [[0.0, -0.5]])
    close(stats["clip_fraction_high"], 0.5)
    close(stats["ratio_mean"], 1.5)


# --- GSPO -------------------------------------------------------------------------------------------------


def test_gspo_ratio_is_the_geometric_mean_of_token_ratios():
    # token ratios 2 and 1: s = sqrt(2 * 1) = 1.4142 < 1 + 0.5, unclipped; loss = -A * s.
    # d(-s)/d logp_t = -s / |y| = -0.7071 for both tokens: the sequence shares one ratio.
    loss, stats, grad = run("gspo", [[LN2, 0.0]], [1.0], settings=with_(aggregation="seq_mean_token_mean"))
    close(loss, -SQRT2)
    close(grad, [[-SQRT2 / 2, -SQRT2 / 2]])
    close(stats["ratio_mean"], SQRT2)
    close(stats["clip_fraction"], 0.0)


def test_gspo_clips_the_whole_sequence():
    # s = sqrt(2) > 1 + 0.2 with A = 1: the loss is -1.2 and no token of the sequence gets a gradient
    loss, stats, grad = run(
        "gspo", [[LN2, 0.0]], [1.0], settings=with_(own=GSPOSettings(clip_ratio_low=0.2, clip_ratio_high=0.2))
    )
    close(loss, -1.2)
    close(grad, [[0.0, 0.0]])
    close(stats["clip_fraction_high"], 1.0)


def test_gspo_ignores_padding_in_the_geometric_mean():
    # the padded token's log-ratio 5 would raise s to exp(5 / 2); only the valid token counts: s = 2
    loss, _, grad = run(
        "gspo", [[LN2, 5.0]], [1.0], mask=[[1, 0]], settings=with_(own=GSPOSettings(clip_ratio_high=2.0))
    )
    close(loss, -2.0)
    close(grad, [[-2.0, 0.0]])


def test_gspo_token_variant_equals_sequence_level_gspo_for_sequence_advantages():
    # Zheng et al. 2025, eq. 5 written out directly: -1/G sum_i min(s_i A_i, clip(s_i) A_i)
    torch.manual_seed(0)
    logprobs = (0.1 * torch.randn(4, 5, dtype=torch.float64)).requires_grad_()
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.float64)
    advantages = torch.tensor([1.0, -1.0, 0.5, -2.0], dtype=torch.float64)
    settings = with_(aggregation="seq_mean_token_mean", own=GSPOSettings(clip_ratio_low=0.01, clip_ratio_high=0.02))
    loss, _ = algos.get_objective("gspo")(
        algos.ObjectiveInputs(logprobs, torch.zeros_like(logprobs), advantages, mask), settings
    )
    (grad,) = torch.autograd.grad(loss, logprobs)

    s = torch.exp((logprobs * mask).sum(-1) / mask.sum(-1))
    expected = -torch.minimum(s * advantages, s.clamp(0.99, 1.02) * advantages).mean()
    (expected_grad,) = torch.autograd.grad(expected, logprobs)
    close(loss, expected)
    close(grad, expected_grad)


# --- CISPO ------------------------------------------------------------------------------------------------


def test_cispo_truncates_the_weight_but_keeps_every_gradient():
    # ratios 2 and 0.5, A = 1: weights min(2, 1.5) = 1.5 and 0.5 (no lower bound); loss -(1.5 + 0.5) / 2.
    # d/dlogp_t of -w_t * A * log pi_t / 2 tokens = -w_t / 2: the truncated token still learns.
    loss, stats, grad = run("cispo", [[LN2, -LN2]], [1.0])
    close(loss, -1.0)
    close(grad, [[-0.75, -0.25]])
    close(stats["clip_fraction_high"], 0.5)
    close(stats["clip_fraction_low"], 0.0)


def test_cispo_weight_is_a_constant_of_the_gradient():
    # at ratio 3 (weight 1.5) the gradient is -1.5 * A, not the -3 * A that d r / d logp would give
    _, _, grad = run("cispo", [[math.log(3.0)]], [-1.0])
    close(grad, [[1.5]])


# --- truncated importance sampling --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ppo_clip", "gspo", "cispo"])
def test_tis_weights_every_objective_per_token(name):
    # at ratio 1 every objective's token loss is -A; behaviour weights exp(0 - behaviour) = 3 and 1.5,
    # capped at 2: loss = -(2 + 1.5) / 2
    behaviour = torch.tensor([[-math.log(3.0), -math.log(1.5)]], dtype=torch.float64)
    loss, stats, _ = run(name, [[0.0, 0.0]], [1.0], settings=with_(tis_cap=2.0), behaviour_logprobs=behaviour)
    close(loss, -1.75)
    close(stats["tis_weight_mean"], 1.75)
    close(stats["tis_truncated_fraction"], 0.5)


def test_tis_without_behaviour_logprobs_is_a_bug():
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        run("ppo_clip", [[0.0]], [1.0], settings=with_(tis_cap=2.0))


# --- truncated-completion mask ------------------------------------------------------------------------------


def test_truncated_completions_leave_the_loss_and_its_normalizer():
    # sequence 1: one token, A = 1; sequence 2 (truncated): three tokens, A = 5. At ratio 1 only
    # sequence 1 counts: loss = -1 / 1 token, not -(1 + 15) / 4.
    loss, stats, grad = run(
        "ppo_clip",
        [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
        [1.0, 5.0],
        mask=[[1, 0, 0], [1, 1, 1]],
        settings=with_(mask_truncated=True),
        truncated=torch.tensor([False, True]),
    )
    close(loss, -1.0)
    close(grad[1], [0.0, 0.0, 0.0])
    close(stats["masked_truncated_fraction"], 0.5)


def test_truncated_completions_are_kept_when_the_mask_is_off():
    loss, stats, _ = run("ppo_clip", [[0.0], [0.0]], [1.0, 3.0], truncated=torch.tensor([False, True]))
    close(loss, -2.0)
    assert "masked_truncated_fraction" not in stats


def test_mask_truncated_without_flags_is_a_bug():
    with pytest.raises(ValueError, match="truncated"):
        run("ppo_clip", [[0.0]], [1.0], settings=with_(mask_truncated=True))


# --- off-policy sequence mask -------------------------------------------------------------------------------

# Current log-probs 0 (= old, ratio 1, token loss -A). KL(behaviour || current) per sequence is the mean of
# behaviour - current: 0.4, 0.4 and 0.1. With delta = 0.25 only sequence 1 (KL 0.4, A < 0) is masked.
BEHAVIOUR = torch.tensor([[0.5, 0.3], [0.5, 0.3], [0.1, 0.1]], dtype=torch.float64)


def test_offpolicy_mask_drops_drifted_negative_sequences_only():
    # kept token losses: sequence 2: -1, -1; sequence 3: +0.5, +0.5. The normalizer stays 6 tokens
    # (DeepSeek-V3.2 eq. 9 keeps 1/|o_i|): loss = (-2 + 1) / 6.
    loss, stats, grad = run(
        "ppo_clip",
        [[0.0, 0.0]] * 3,
        [-1.0, 1.0, -0.5],
        settings=with_(offpolicy_kl_threshold=0.25),
        behaviour_logprobs=BEHAVIOUR,
    )
    close(loss, -1.0 / 6)
    close(grad[0], [0.0, 0.0])
    close(stats["masked_offpolicy_fraction"], 1 / 3)


def test_offpolicy_mask_measures_drift_from_old_logprobs_without_a_behaviour_policy():
    # current log-probs -0.5 against old 0: KL(old || current) = 0.5 > 0.25, A < 0: masked, loss 0
    loss, stats, _ = run("ppo_clip", [[-0.5]], [-1.0], settings=with_(offpolicy_kl_threshold=0.25, clip_ratio_low=0.5))
    close(loss, 0.0)
    close(stats["masked_offpolicy_fraction"], 1.0)


def test_offpolicy_mask_with_token_advantages_masks_only_negative_tokens():
    # one drifted sequence (KL 0.4) with token advantages [-1, 1]: the first token is masked
    loss, _, _ = run(
        "ppo_clip",
        [[0.0, 0.0]],
        [[-1.0, 1.0]],
        settings=with_(offpolicy_kl_threshold=0.25),
        behaviour_logprobs=BEHAVIOUR[:1],
    )
    close(loss, -0.5)


# --- statistics ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ppo_clip", "gspo", "cispo"])
def test_stats_are_detached_scalars_with_the_required_names(name):
    behaviour = torch.zeros(1, 2, dtype=torch.float64)
    settings = with_(tis_cap=2.0, mask_truncated=True, offpolicy_kl_threshold=1.0)
    _, stats, _ = run(
        name, [[0.1, -0.1]], [1.0], settings=settings, behaviour_logprobs=behaviour, truncated=torch.tensor([False])
    )
    extra = {"tis_weight_mean", "tis_truncated_fraction", "masked_truncated_fraction", "masked_offpolicy_fraction"}
    assert stats.keys() == REQUIRED_STATS | extra
    assert all(v.over().dim() == 0 and not v.over().requires_grad for v in stats.values())


@pytest.mark.parametrize("name", ["ppo_clip", "gspo", "cispo"])
def test_a_statistic_over_some_rows_is_the_objective_run_on_those_rows_alone(name):
    """The learner's per-task statistics read ``RowStat.over(rows)``: the same numbers as running the
    objective again on the task's rows, without running it again."""
    torch.manual_seed(1)
    logprobs, old = 0.4 * torch.randn(4, 3, dtype=torch.float64), 0.4 * torch.randn(4, 3, dtype=torch.float64)
    advantages = torch.tensor([1.0, -1.0, 0.5, -2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float64)
    behaviour, truncated = old + 0.2, torch.tensor([False, True, False, False])
    settings = for_(name, with_(tis_cap=1.2, mask_truncated=True, offpolicy_kl_threshold=0.05))
    objective = algos.get_objective(name)
    _, stats = objective(algos.ObjectiveInputs(logprobs, old, advantages, mask, behaviour, truncated), settings)
    rows = torch.tensor([True, False, True, True])
    _, alone = objective(
        algos.ObjectiveInputs(
            logprobs[rows], old[rows], advantages[rows], mask[rows], behaviour[rows], truncated[rows]
        ),
        settings,
    )
    for key, stat in stats.items():
        assert torch.equal(stat.over(rows), alone[key].over()), key


def test_objectives_declare_their_own_settings_classes():
    assert algos.objective_settings_class("gspo") is GSPOSettings
    assert algos.objective_settings_class("cispo") is CISPOSettings
    assert algos.objective_settings_class("ppo_clip") is None
    assert GSPOSettings().clip_ratio_low == 3e-4 and CISPOSettings().clip_ratio_high == 4.0


def test_objective_totals_leave_truncated_completions_out():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    tokens, sequences = algos.objective_totals(mask, torch.tensor([False, True, False]), with_(mask_truncated=True))
    close(tokens, 2.0)
    close(sequences, 1.0)


def test_approx_kl_is_k3_of_the_token_ratio():
    _, stats, _ = run("ppo_clip", [[LN2]], [1.0])
    close(stats["approx_kl"], 2.0 - 1.0 - LN2)


# --- bad settings -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("clip_ratio_low", 1.0),
        ("clip_ratio_high", -0.1),
        ("tis_cap", 0.0),
        ("offpolicy_kl_threshold", -0.1),
        ("aggregation", "sum"),
    ],
)
def test_bad_settings_are_user_errors(field, value):
    with pytest.raises(UserError, match=field if field != "aggregation" else "loss aggregation"):
        run("ppo_clip", [[0.0]], [1.0], settings=with_(**{field: value}))


@pytest.mark.parametrize(
    "own, field, value",
    [
        (GSPOSettings, "clip_ratio_low", -1e-4),
        (GSPOSettings, "clip_ratio_high", float("nan")),
        (CISPOSettings, "clip_ratio_high", -1.0),
        (GSPOSettings, "clip_ratio", 0.1),
    ],
)
def test_bad_own_settings_are_refused_by_their_class(own, field, value):
    with pytest.raises(ValidationError, match=field):
        own(**{field: value})


# --- gradient accumulation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ppo_clip", "gspo", "cispo"])
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_micro_batch_losses_with_minibatch_totals_add_up_to_the_full_batch_loss(name, aggregation):
    torch.manual_seed(0)
    logprobs = (0.3 * torch.randn(5, 4, dtype=torch.float64)).requires_grad_()
    old = 0.3 * torch.randn(5, 4, dtype=torch.float64)
    advantages = torch.tensor([1.0, -1.0, 0.5, 2.0, -0.5], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.float64)
    behaviour = old + 0.3 * torch.randn(5, 4, dtype=torch.float64)
    truncated = torch.tensor([False, False, False, True, False])
    settings = with_(
        aggregation=aggregation, max_tokens=4, tis_cap=1.5, mask_truncated=True, offpolicy_kl_threshold=0.05
    )
    objective, settings = algos.get_objective(name), for_(name, settings)

    full, _ = objective(algos.ObjectiveInputs(logprobs, old, advantages, mask, behaviour, truncated), settings)
    (full_grad,) = torch.autograd.grad(full, logprobs)

    parts = [slice(0, 2), slice(2, 5)]
    totals = [algos.objective_totals(mask[p], truncated[p], settings) for p in parts]
    total_tokens, total_sequences = sum(t[0] for t in totals), sum(t[1] for t in totals)
    summed = sum(
        objective(
            algos.ObjectiveInputs(
                logprobs[p],
                old[p],
                advantages[p],
                mask[p],
                behaviour[p],
                truncated[p],
                total_tokens=total_tokens,
                total_sequences=total_sequences,
            ),
            settings,
        )[0]
        for p in parts
    )
    (summed_grad,) = torch.autograd.grad(summed, logprobs)
    close(summed, full)
    close(summed_grad, full_grad)
