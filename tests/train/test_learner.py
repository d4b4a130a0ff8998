"""The learner's stages on their own: advantages, selection, minibatches, micro-batches, statistics."""

import copy

import pytest
import torch

from polyrl.device import HOST
from polyrl.learner.settings import UpdateSettings
from polyrl.learner.update import micro_batches, minibatches, policy_update
from polyrl.learner.update_batch import prepare_update
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.rollout import Trajectory
from polyrl.tasks import Problem, Verdict
from polyrl.train.config import RLConfig


def _traj(task: str, group: int, prompt: list[int], response: list[int], reward: float, finished=True) -> Trajectory:
    problem = Problem(task, "q", "q", None, None, 0, "train", 0.0, {})
    verdict = Verdict(reward, reward >= 1, "correct" if reward >= 1 else "wrong")
    return Trajectory(task, group, problem, prompt, response, "", finished, reward, {"verifier": reward}, verdict)


def _step(seed: int = 0) -> list[Trajectory]:
    """Four groups of four: two tasks, mixed rewards in three groups, one all-zero group; prompts of 3–6
    tokens shared within a group, responses of 2–7 tokens."""
    g = torch.Generator().manual_seed(seed)
    trajs = []
    for group in range(4):
        task = "a" if group < 2 else "b"
        prompt = torch.randint(3, 40, (3 + group,), generator=g).tolist()
        for k in range(4):
            response = torch.randint(3, 40, (2 + (k + group) % 6,), generator=g).tolist()
            reward = 0.0 if group == 3 else float((k + group) % 2) * (1.0 if task == "a" else 0.3)
            trajs.append(_traj(task, group, prompt, response, reward, finished=k != 3))
    return trajs


@pytest.fixture(scope="module")
def policy():
    tiny = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}
    return load_policy(ModelConfig(path="tiny", tiny=tiny), seed=0, device=HOST)


def _update(policy, cfg: RLConfig, trajs=None):
    model = copy.deepcopy(policy.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    settings = UpdateSettings.from_config(cfg)
    batch = prepare_update(trajs or _step(), ["a", "b"], policy.tokenizer.pad_token_id, settings)
    torch.manual_seed(0)
    result = policy_update(model, optimizer, batch, settings, list(model.parameters()), device=HOST)
    return result, model


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
@pytest.mark.parametrize("share_prompts", [True, False])
def test_micro_batches_give_the_unsplit_gradient(policy, aggregation, share_prompts):
    cfg = RLConfig(loss_aggregation=aggregation, share_prompts=share_prompts, skip_zero_advantage=False)
    whole, model_whole = _update(policy, cfg)
    split, model_split = _update(policy, cfg.model_copy(update={"micro_batch_tokens": 24}))
    assert split.updates == whole.updates == 1
    for (name, a), b in zip(model_whole.named_parameters(), model_split.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert split.loss == pytest.approx(whole.loss, abs=1e-6)


def test_skipping_zero_advantage_rows_keeps_the_gradient(policy):
    cfg = RLConfig(skip_zero_advantage=True)
    skipped, model_skip = _update(policy, cfg)
    full, model_full = _update(policy, cfg.model_copy(update={"skip_zero_advantage": False}))
    assert skipped.trained_sequences < full.trained_sequences == 16
    for a, b in zip(model_full.parameters(), model_skip.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_zero_variance_groups_get_exactly_zero_after_task_normalization(policy):
    cfg = RLConfig(task_normalize=True)
    batch = prepare_update(_step(), ["a", "b"], policy.tokenizer.pad_token_id, UpdateSettings.from_config(cfg))
    zero_group = batch.group_ids == 3
    assert torch.equal(batch.advantages[zero_group], torch.zeros(4))
    assert (batch.advantages[~zero_group] != 0).all()
    assert set(batch.active.tolist()) == set(torch.nonzero(~zero_group).flatten().tolist())


def test_the_number_of_optimizer_steps_does_not_depend_on_skipped_rows(policy):
    cfg = RLConfig(minibatches=4, epochs=2)
    result, _ = _update(policy, cfg)
    assert result.trained_sequences == 12 and result.updates == 8


def test_minibatches_split_the_rows_into_a_fixed_count():
    chunks = minibatches(torch.arange(10), 4, torch.Generator().manual_seed(0))
    assert [len(c) for c in chunks] == [3, 3, 2, 2]
    assert sorted(torch.cat(chunks).tolist()) == list(range(10))
    assert len(minibatches(torch.arange(2), 4)) == 2 and minibatches(torch.arange(0), 4) == []


def test_micro_batches_respect_the_token_budget_and_keep_groups_together():
    rows = torch.tensor([0, 4, 1, 5, 2, 3])
    lengths = torch.tensor([5, 5, 5, 5, 12, 12])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    pieces = [p.tolist() for p in micro_batches(rows, lengths, groups, budget=20)]
    assert pieces == [[0, 1, 2, 3], [4], [5]]  # 4 x 5 = 20 fits; 12-token rows go one by one
    assert [p.tolist() for p in micro_batches(rows, lengths, groups, None)] == [rows.tolist()]


def test_every_objective_statistic_is_reported_overall_and_per_task(policy):
    result, _ = _update(policy, RLConfig(epochs=2, minibatches=2))
    for key in (
        "clip_fraction",
        "clip_fraction_low",
        "clip_fraction_high",
        "approx_kl",
        "ratio_mean",
        "ratio_max",
        "ratio_min",
    ):
        assert (
            key in result.objective and key in result.objective_by_task["a"] and key in result.objective_by_task["b"]
        )
    assert result.objective["ratio_min"] <= result.objective["ratio_mean"] <= result.objective["ratio_max"]


def test_per_task_statistics_come_from_the_one_objective_call_per_micro_batch(policy, monkeypatch):
    """The objective runs once per micro-batch, never again per task: each task's statistics are read off
    that call's statistics over the task's rows."""
    from polyrl.algos import get_objective
    from polyrl.learner import update as learner

    original, calls = get_objective("ppo_clip"), []

    def spy(inputs, settings):
        loss, stats = original(inputs, settings)
        calls.append(stats)
        return loss, stats

    monkeypatch.setattr(learner, "get_objective", lambda name: spy)
    result, _ = _update(policy, RLConfig(epochs=2, minibatches=2, skip_zero_advantage=False))
    assert len(calls) == result.updates == 4  # no micro-batch split: one call per minibatch

    calls.clear()  # two epochs over the rows in order: the second one off-policy, so the statistics vary
    monkeypatch.setattr(learner, "minibatches", lambda rows, count, generator=None: [rows])
    result, _ = _update(policy, RLConfig(epochs=2, skip_zero_advantage=False))
    assert len(calls) == 2
    task_a = torch.arange(16) < 8  # _step(): groups 0 and 1 (rows 0-7) are task a
    assert float(calls[1]["clip_fraction"].over(task_a)) != float(calls[1]["clip_fraction"].over(~task_a))
    for key in calls[0]:
        values = [float(stats[key].over(task_a)) for stats in calls]  # both epochs weigh the same tokens
        expected = max(values) if key.endswith("_max") else min(values) if key.endswith("_min") else sum(values) / 2
        assert result.objective_by_task["a"][key] == pytest.approx(expected, abs=1e-7), key


@pytest.mark.parametrize("objective", ["ppo_clip", "gspo", "cispo"])
def test_each_registered_objective_trains(policy, objective):
    result, model = _update(policy, RLConfig(objective=objective, skip_zero_advantage=False))
    assert result.updates == 1 and result.skipped_updates == 0
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), policy.model.parameters()))


def test_masking_truncated_completions_removes_them_from_the_loss(policy):
    trajs = _step()
    cfg = RLConfig(mask_truncated=True, skip_zero_advantage=False)
    result, _ = _update(policy, cfg, trajs)
    assert result.objective["masked_truncated_fraction"] == pytest.approx(0.25)


def test_gradient_surgery_none_is_the_plain_update_and_pcgrad_trains_on_the_same_loss(policy):
    plain, model_plain = _update(policy, RLConfig(skip_zero_advantage=False))
    _per_task, model_per_task = _update(policy, RLConfig(skip_zero_advantage=False, gradient_surgery="none"))
    for a, b in zip(model_plain.parameters(), model_per_task.parameters()):
        assert torch.equal(a, b)
    surgery, _model_surgery = _update(policy, RLConfig(skip_zero_advantage=False, gradient_surgery="pcgrad"))
    assert surgery.loss == pytest.approx(plain.loss, abs=1e-6)  # the same rows and loss, another direction
    assert surgery.updates == 1 and surgery.skipped_updates == 0
    assert "a" in surgery.objective_by_task and "b" in surgery.objective_by_task


def test_pcgrad_in_the_learner_equals_the_sum_when_the_batch_has_one_task(policy):
    one_task = [t for t in _step() if t.task == "a"]
    _plain, model_plain = _update(policy, RLConfig(skip_zero_advantage=False), one_task)
    _pc, model_pc = _update(policy, RLConfig(skip_zero_advantage=False, gradient_surgery="pcgrad"), one_task)
    for a, b in zip(model_plain.parameters(), model_pc.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_a_step_mixing_episodes_and_single_turn_rounds_collates_with_all_ones_for_single_turn_rows():
    # dynamic sampling can refill a mixed step with a round of single-turn groups only: their masks stay None
    from polyrl.learner.update_batch import collate_trajectories

    episode = _traj("env", 0, [1, 2], [3, 4, 5], 1.0)
    episode.policy_mask = [1, 0, 1]
    single = _traj("a", 1, [1, 2], [6, 7], 0.0)
    tokens = collate_trajectories([episode, single], pad_id=0)
    assert tokens.loss_mask.tolist() == [[0, 1, 0, 1], [0, 1, 1, 0]]
