"""Advantage estimators against hand-computed numbers: GRPO, Dr. GRPO, RLOO, REINFORCE++, task
normalization, zero-variance groups and token-level GAE."""

import math

import pytest
import torch

from polyrl import UserError, algos

EPS = 1e-6


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# --- GRPO ---------------------------------------------------------------------------------------------


def test_grpo_uses_population_std_so_half_solved_group_is_plus_minus_one():
    close(algos.grpo(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.zeros(4, dtype=torch.long)), [1, -1, 1, -1])


def test_grpo_one_of_three_solved():
    # mean 1/3, population std sqrt(2)/3
    close(
        algos.grpo(torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long)),
        [math.sqrt(2), -1 / math.sqrt(2), -1 / math.sqrt(2)],
    )


def test_grpo_zero_variance_group_gets_exactly_zero_even_for_non_representable_rewards():
    # the float32 mean of seven 0.3s is off by 3e-8; naively divided by (std + eps) that becomes -0.03
    advantages = algos.grpo(torch.tensor([0.3] * 7 + [1.0, 0.0]), torch.tensor([0] * 7 + [1, 1]))
    assert advantages[:7].tolist() == [0.0] * 7
    close(advantages[7:], [1, -1])


def test_grpo_handles_ragged_interleaved_groups_like_separate_calls():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    group_ids = torch.tensor([7, 3, 7, 3, 3, 7, 7])
    together = algos.grpo(rewards, group_ids)
    for g in (3, 7):
        members = group_ids == g
        close(together[members], algos.grpo(rewards[members], torch.zeros(int(members.sum()), dtype=torch.long)))


def test_group_ids_may_be_prompt_uids():
    by_name = algos.grpo(torch.tensor([1.0, 0.0, 1.0, 1.0]), ["q-a", "q-a", "q-b", "q-b"])
    close(by_name, [1, -1, 0, 0])


def test_integer_rewards_are_accepted():
    close(algos.grpo(torch.tensor([1, 0]), torch.tensor([0, 0])), [1, -1])


# --- Dr. GRPO, RLOO -------------------------------------------------------------------------------------


def test_dr_grpo_subtracts_group_mean_without_std():
    close(
        algos.dr_grpo(torch.tensor([1.0, 0.0, 0.0, 2.0, 4.0]), torch.tensor([0, 0, 0, 1, 1])),
        [2 / 3, -1 / 3, -1 / 3, -1, 1],
    )


def test_rloo_uses_leave_one_out_mean():
    # baselines: mean(0, 0) = 0 for the first, mean(1, 0) = 0.5 for the others
    close(algos.rloo(torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long)), [1.0, -0.5, -0.5])


def test_rloo_singleton_group_gets_zero():
    close(algos.rloo(torch.tensor([1.0, 1.0, 0.0]), torch.tensor([0, 1, 1])), [0.0, 1.0, -1.0])


# --- REINFORCE++ --------------------------------------------------------------------------------------------


def test_reinforce_pp_normalizes_over_the_batch_ignoring_groups():
    # batch mean 0.25, population std sqrt(3)/4
    expected = [math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)]
    close(algos.reinforce_pp(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1])), expected)


def test_reinforce_pp_baseline_centers_per_group_then_divides_by_batch_std():
    # centered [0.5, -0.5, 0, 0]; batch std sqrt(0.5 / 4) = 1 / (2 sqrt 2)
    advantages = algos.reinforce_pp_baseline(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    close(advantages, [math.sqrt(2), -math.sqrt(2), 0.0, 0.0])
    assert advantages[2:].tolist() == [0.0, 0.0]


def test_all_equal_batch_gives_zero_not_nan():
    rewards, group_ids = torch.ones(4), torch.tensor([0, 0, 1, 1])
    for name in algos.advantage_names("rewards"):
        assert algos.get_advantage_estimator(name)(rewards, group_ids, EPS).tolist() == [0.0] * 4, name


# --- registry -----------------------------------------------------------------------------------------------


def test_builtin_estimators_are_registered_by_name():
    assert {"grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"} <= set(algos.ADVANTAGE_ESTIMATORS)
    assert algos.get_advantage_estimator("rloo") is algos.rloo


def test_unknown_estimator_is_a_user_error_listing_known_names():
    with pytest.raises(UserError, match=r"unknown advantage estimator 'grop'.*grpo"):
        algos.get_advantage_estimator("grop")


def test_register_advantage_adds_a_named_estimator():
    @algos.register_advantage("raw_reward_for_test")
    def raw(rewards, group_ids, eps=1e-6):
        return rewards

    try:
        assert algos.get_advantage_estimator("raw_reward_for_test") is raw
    finally:
        del algos.ADVANTAGE_ESTIMATORS["raw_reward_for_test"]


def test_registering_a_different_function_under_a_taken_name_fails():
    with pytest.raises(ValueError, match="already registered"):
        algos.register_advantage("grpo")(lambda rewards, group_ids, eps=1e-6: rewards)


# --- task normalization -------------------------------------------------------------------------------------


def test_task_normalize_gives_each_task_zero_mean_unit_std():
    advantages = torch.tensor([10.0, -10.0, 30.0, 0.1, -0.1, 0.3, 0.2])
    task_ids = ["math", "math", "math", "code", "code", "code", "code"]
    normalized = algos.task_normalize(advantages, task_ids)
    for members in (slice(0, 3), slice(3, 7)):
        close(normalized[members].mean(), 0.0)
        close(normalized[members].std(unbiased=False), 1.0, atol=1e-4)


def test_task_normalize_hand_values():
    close(algos.task_normalize(torch.tensor([1.0, 3.0, 5.0, 7.0]), torch.tensor([0, 0, 1, 1])), [-1, 1, -1, 1])


def test_task_normalize_single_element_and_zero_variance_tasks_give_zero():
    normalized = algos.task_normalize(torch.tensor([2.0, 0.0, 0.0, 1.0, -1.0]), torch.tensor([0, 1, 1, 2, 2]))
    assert not torch.isnan(normalized).any()
    assert normalized[:3].tolist() == [0.0, 0.0, 0.0]
    close(normalized[3:], [1, -1])


# --- zero-variance groups --------------------------------------------------------------------------------


def test_zero_variance_groups_marks_every_member_of_constant_groups():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.5])
    group_ids = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    assert algos.zero_variance_groups(rewards, group_ids).tolist() == [True, True, False, False, True, True, True]


def test_zero_variance_group_fraction_counts_groups_not_completions():
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    assert algos.zero_variance_group_fraction(rewards, torch.tensor([0, 0, 0, 0, 1, 1])) == pytest.approx(0.5)


# --- GAE ------------------------------------------------------------------------------------------------------


def test_gae_hand_computed():
    # gamma*lam = 0.45; deltas: t2 = 1 - 0.7 = 0.3, t1 = 0.9*0.7 - 0.6 = 0.03, t0 = 0.9*0.6 - 0.5 = 0.04
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    advantages, returns = algos.gae(rewards, values, torch.ones(1, 3), gamma=0.9, lam=0.5)
    close(advantages, [[0.04 + 0.45 * 0.165, 0.03 + 0.45 * 0.3, 0.3]])
    close(returns, [[0.61425, 0.765, 1.0]])


def test_gae_with_gamma_and_lambda_one_is_reward_to_go_minus_value():
    rewards = torch.tensor([[1.0, 2.0, 3.0]])
    values = torch.tensor([[1.0, 1.0, 1.0]])
    advantages, returns = algos.gae(rewards, values, torch.ones(1, 3), gamma=1.0, lam=1.0)
    close(advantages, [[5.0, 4.0, 2.0]])
    close(returns, [[6.0, 5.0, 3.0]])


def test_gae_ignores_trailing_padding():
    rewards = torch.tensor([[0.0, 0.0, 1.0, 5.0, 5.0]])
    values = torch.tensor([[0.5, 0.6, 0.7, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    advantages, returns = algos.gae(rewards, values, mask, gamma=0.9, lam=0.5)
    close(advantages, [[0.11425, 0.165, 0.3, 0.0, 0.0]])
    close(returns, [[0.61425, 0.765, 1.0, 0.0, 0.0]])


def test_gae_skips_masked_environment_tokens_in_the_middle():
    # t1 is an observation token: t0 bootstraps from V(t2) = 0.7 with one discount, delta = 0.63 - 0.5
    rewards = torch.tensor([[0.0, 7.0, 1.0]])
    values = torch.tensor([[0.5, 9.0, 0.7]])
    advantages, _ = algos.gae(rewards, values, torch.tensor([[1, 0, 1]]), gamma=0.9, lam=0.5)
    close(advantages, [[0.13 + 0.45 * 0.3, 0.0, 0.3]])


def test_gae_rows_are_independent():
    rewards = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    values = torch.zeros(2, 2)
    advantages, _ = algos.gae(rewards, values, torch.tensor([[1, 1], [1, 0]]), gamma=1.0, lam=1.0)
    close(advantages, [[1.0, 1.0], [1.0, 0.0]])


def test_gae_rejects_gamma_outside_unit_interval():
    with pytest.raises(UserError, match="gamma"):
        algos.gae(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), gamma=1.5, lam=0.9)


def test_gae_is_a_registered_critic_estimator_that_asks_the_critic():
    from polyrl.algos import uses_critic

    assert uses_critic("gae") and not uses_critic("grpo") and not uses_critic("rloo")

    class Critic:
        def advantages(self, tokens, rewards):
            return rewards[:, None] * 2, rewards[:, None], {"value_mean": 0.5}

    adv, returns, stats = algos.get_advantage_estimator("gae")(Critic(), None, torch.tensor([1.0, -1.0]))
    assert adv.tolist() == [[2.0], [-2.0]] and returns.tolist() == [[1.0], [-1.0]] and stats == {"value_mean": 0.5}


# --- one registry, one calling convention ---------------------------------------------------------------------


def test_every_estimator_is_called_with_the_same_inputs_and_reads_what_it_declared():
    from polyrl.algos import AdvantageInputs, EpisodeCredit

    credit = [EpisodeCredit(0, 1.0, [1.0], [(0, 2)], 0), EpisodeCredit(0, 0.0, [0.0], [(0, 1)], 0)]
    inputs = AdvantageInputs(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), credit, width=3)
    close(algos.ADVANTAGE_ESTIMATORS.lookup("grpo")(inputs).advantages, [1.0, -1.0])
    # returns 1 and 0: mean 0.5, std 0.5; turn k of each episode gets (reward-to-go - 0.5) / 0.5
    assert algos.ADVANTAGE_ESTIMATORS.lookup("turn")(inputs).advantages.tolist() == [[1.0, 1.0, 0.0], [-1.0, 0.0, 0.0]]
    assert {n: algos.ADVANTAGE_ESTIMATORS[n].reads for n in ("grpo", "turn", "gae")} == {
        "grpo": "rewards",
        "turn": "turns",
        "gae": "critic",
    }


def test_rl_advantage_takes_group_rewards_or_the_critic_and_advantage_level_takes_turns():
    from pydantic import ValidationError

    from polyrl.train.rl_config import RLConfig

    with pytest.raises(ValidationError, match="advantage estimator 'turn' reads episode turns"):
        RLConfig(advantage="turn")
    with pytest.raises(ValidationError, match="advantage estimator 'rloo' reads group rewards"):
        RLConfig(advantage_level="rloo")


def test_a_registered_turns_estimator_is_an_advantage_level():
    from polyrl.train.rl_config import RLConfig

    @algos.register_advantage("flat_turns_for_test", reads="turns")
    def flat(samples, width, eps=1e-6):
        return torch.ones(len(samples), width)

    try:
        assert RLConfig(advantage_level="flat_turns_for_test").advantage_level == "flat_turns_for_test"
    finally:
        del algos.ADVANTAGE_ESTIMATORS["flat_turns_for_test"]
