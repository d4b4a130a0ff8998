"""The learner keeps every tensor on the placement's device (issue #34), checked on a CPU.

polyrl's first GPU run crashed at its first RL update: host tensors (advantages, masks, frozen log-probs,
statistics buffers) met the model's outputs on cuda:0. A CPU test cannot see that, since there every tensor is a
host tensor; under ``tests/device_guard.py`` the model lives on a pretend second device, and an op that mixes a
tensor there with a (non-scalar) host tensor raises as CUDA does. Each test below builds its batches inside the
guard, so every host tensor is known as one, and runs the real code path: the SFT step (one process and the FSDP
ranks' branch), the RL update under every registered objective, advantage estimator and loss aggregation, the
critic and GAE, the KL reference (a copy, and LoRA's base model), PCGrad and CAGrad, behaviour log-probs with
truncated importance sampling, generation and evaluation, a whole run through the Trainer, and memory.py's
polyrl settings.
"""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import torch
from device_guard import DEVICE, DeviceMismatch, on_device, second_device

from polyrl.algos import OBJECTIVES, advantage_names
from polyrl.algos.losses import AGGREGATIONS
from polyrl.device import HOST
from polyrl.forward import collate, sequence_logprobs
from polyrl.learner import ONE_PROCESS, UpdateSettings, policy_update, prepare_update, sft_step
from polyrl.learner.update import BaseModelReference
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.rollout import Trajectory
from polyrl.tasks import Problem, Verdict
from polyrl.train.config import RLConfig

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def policy():
    return load_policy(ModelConfig(path="tiny", tiny=TINY), seed=0, device=HOST)


def _traj(task, group, prompt, response, reward, finished=True, behaviour=None, turns=None) -> Trajectory:
    problem = Problem(task, "q", "q", None, None, 0, "train", 0.0, {})
    verdict = Verdict(reward, reward >= 1, "correct" if reward >= 1 else "wrong")
    t = Trajectory(task, group, problem, prompt, response, "", finished, reward, {"verifier": reward}, verdict)
    t.behaviour_logprobs = behaviour
    if turns:  # two policy turns with an environment turn between them
        t.turn_spans = [(0, 2), (4, len(response))]
        t.turn_rewards = [0.0, reward]
        t.policy_mask = [1, 1, 0, 0] + [1] * (len(response) - 4)
    return t


def _step(behaviour: bool = False, turns: bool = False) -> list[Trajectory]:
    """Four groups of four over two tasks, mixed rewards, prompts shared within a group (made on the host)."""
    g = torch.Generator().manual_seed(0)
    out = []
    for group in range(4):
        task = "a" if group < 2 else "b"
        prompt = torch.randint(3, 40, (3 + group,), generator=g).tolist()
        for k in range(4):
            response = torch.randint(3, 40, (6 + (k + group) % 4,), generator=g).tolist()
            reward = float((k + group) % 2) * (1.0 if task == "a" else 0.5)
            lp = [-2.0 - 0.1 * j for j in range(len(response))] if behaviour else None
            out.append(_traj(task, group, prompt, response, reward, finished=k != 3, behaviour=lp, turns=turns))
    return out


def _update(
    policy, cfg: RLConfig, *, trajs=None, reference=None, lora=False, critic=False, tis_cap=None, ranks=ONE_PROCESS
):
    """One policy update of a copy of the tiny policy on the pretend device, everything built inside the guard."""
    model = copy.deepcopy(policy.model)
    if lora:
        peft = pytest.importorskip("peft")
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    with second_device(model) as guard:
        settings = UpdateSettings.from_config(cfg, tis_cap=tis_cap)
        value_model = None
        if critic:
            from polyrl.critic import Critic

            value_model = Critic(cfg.critic, model, guard.device)
        batch = prepare_update(trajs or _step(), ["a", "b"], policy.tokenizer.pad_token_id, settings, value_model)
        ref = BaseModelReference(model) if lora else copy.deepcopy(model) if reference else None
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        params = [p for p in model.parameters() if p.requires_grad]
        result = policy_update(
            model,
            optimizer,
            batch,
            settings,
            params,
            reference=ref,
            critic=value_model,
            device=guard.device,
            ranks=ranks,
        )
        assert guard.checked > 100  # the update really ran on the pretend device
    assert result.updates and not result.skipped_updates
    return result


# -- the guard itself -----------------------------------------------------------------------------------------


def test_the_guard_raises_where_cuda_would_and_allows_what_cuda_allows():
    weight = torch.nn.Linear(3, 2)
    with second_device(weight) as guard:
        out = weight(torch.ones(4, 3).to(guard.device))
        assert on_device(out) and out.device == DEVICE
        with pytest.raises(DeviceMismatch, match="same device"):
            out * torch.ones(4, 2)  # a host tensor meets a device one
        with pytest.raises(DeviceMismatch):
            weight(torch.ones(4, 3))  # host inputs into device weights
        assert on_device(out * torch.tensor(2.0))  # a 0-d host tensor is a scalar to any device
        assert on_device(out[torch.tensor([0, 2])])  # host indices into a device tensor
        assert on_device(torch.zeros(2, device=out.device)) and on_device(torch.zeros_like(out))
        assert on_device(out.cpu()) is False and float(out.detach().sum()) == float(out.detach().cpu().sum())
        with pytest.raises(TypeError, match="numpy"):
            out.detach().numpy()


def test_the_guard_catches_the_bug_the_first_gpu_run_hit(policy):
    """``-advantages * ratio`` with host advantages and device log-probs: what crashed at the first RL update."""
    from polyrl.algos import ObjectiveInputs, get_objective

    settings = UpdateSettings.from_config(RLConfig())
    with second_device(policy.model) as guard:
        batch = collate([([1, 2, 3], [4, 5, 6]), ([1, 2, 3], [7, 8])], 0)
        logp, _ = sequence_logprobs(policy.model, batch.to(guard.device))
        host_advantages = torch.tensor([1.0, -1.0])
        inputs = ObjectiveInputs(logp, logp.detach(), host_advantages, batch.loss_mask.to(guard.device))
        with pytest.raises(DeviceMismatch):
            get_objective("ppo_clip")(inputs, settings.objective_settings)


# -- SFT ----------------------------------------------------------------------------------------------------------


class OneRank:
    """The collectives of a sharded run with one rank, without a process group: the FSDP branch of the learner
    (lockstep passes, idle passes, summed losses and rows) on one process."""

    rank, world, is_writer, sharded = 0, 1, True, True

    def mine(self, rows):
        return rows

    def lockstep(self, pieces):
        return [*pieces, None]  # one more rank with one more micro-batch: this rank takes an idle pass

    def sum(self, value):
        return value

    def sum_rows(self, values):
        return values

    def merge_rows(self, values):
        return values

    def gather(self, obj):
        return [obj]


@pytest.mark.parametrize("ranks", [ONE_PROCESS, OneRank()], ids=["one-process", "fsdp-ranks"])
@pytest.mark.parametrize("micro_batch_tokens", [None, 16])
def test_the_sft_step_runs_on_the_device_in_both_placements(policy, ranks, micro_batch_tokens):
    model = copy.deepcopy(policy.model)
    sequences = [([1, 2, 3, 4], [5, 6, 7]), ([1, 2], [8, 9, 10, 11]), ([3, 4, 5], [6, 7], [1, 0])]
    with second_device(model) as guard:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        loss = sft_step(
            model, optimizer, list(model.parameters()), 0, sequences, micro_batch_tokens, guard.device, ranks
        )
    assert loss is not None and loss > 0


# -- the RL update --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("objective", OBJECTIVES.names())
@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
def test_every_objective_and_loss_aggregation_updates_on_the_device(policy, objective, aggregation):
    cfg = RLConfig(objective=objective, loss_aggregation=aggregation, epochs=2, minibatches=2, micro_batch_tokens=48)
    _update(policy, cfg)


@pytest.mark.parametrize("estimator", advantage_names("rewards"))
def test_every_advantage_estimator_updates_on_the_device(policy, estimator):
    _update(policy, RLConfig(advantage=estimator, task_normalize=estimator == "grpo"))


def test_turn_level_credit_updates_on_the_device(policy):
    _update(policy, RLConfig(advantage_level="turn", task_normalize=False), trajs=_step(turns=True))


def test_the_critic_and_gae_update_on_the_device(policy):
    result = _update(policy, RLConfig(advantage="gae", minibatches=2), critic=True)
    assert result.value_loss == result.value_loss  # a number: the critic took its steps on the device too


@pytest.mark.parametrize("lora", [False, True], ids=["reference-copy", "lora-base-model"])
def test_the_kl_reference_and_entropy_terms_update_on_the_device(policy, lora):
    result = _update(policy, RLConfig(kl_coef=0.1, entropy_coef=0.01), reference=True, lora=lora)
    assert all(kl == kl for kl in result.seq_kl)


def test_the_fsdp_ranks_branch_of_the_update_runs_on_the_device(policy):
    """Each rank's share of each minibatch, idle passes where another rank has one more micro-batch, the frozen
    log-probs summed across ranks and the statistics merged (``ranks=``), with one rank standing for them all."""
    cfg = RLConfig(epochs=2, minibatches=2, micro_batch_tokens=48, kl_coef=0.05)
    result = _update(policy, cfg, reference=True, ranks=OneRank())
    assert result.objective and all(kl == kl for kl in result.seq_kl)


@pytest.mark.parametrize("surgery", ["pcgrad", "cagrad"])
def test_gradient_surgery_updates_on_the_device(policy, surgery):
    _update(policy, RLConfig(gradient_surgery=surgery))


def test_behaviour_log_probs_and_truncated_importance_sampling_update_on_the_device(policy):
    result = _update(policy, RLConfig(offpolicy_kl_threshold=0.5), trajs=_step(behaviour=True), tis_cap=2.0)
    assert "mismatch_abs_mean" in result.objective and "tis_weight_mean" in result.objective


# -- generation, evaluation and a whole run -----------------------------------------------------------------


@pytest.mark.parametrize("sampling", [{"greedy": True}, {"temperature": 0.9, "top_p": 0.8}])
@pytest.mark.parametrize("shared_prefill", [True, False])
def test_generation_runs_on_the_device(policy, sampling, shared_prefill):
    from polyrl.policy.generation import TransformersBackend

    model = copy.deepcopy(policy.model)
    with second_device(model) as guard:
        backend = TransformersBackend(model, policy.tokenizer, shared_prefill=shared_prefill, device=guard.device)
        gens = backend.generate([[1, 5, 6], [1, 5, 6], [1, 7]], max_new_tokens=6, **sampling)
    assert len(gens) == 3 and all(g.completion_ids for g in gens)


def test_checkpoint_evaluation_runs_on_the_device(policy, tmp_path):
    from polyrl.eval.runner import run_suite
    from polyrl.eval.sources import LocalModelSource
    from polyrl.eval.suite import parse_suite
    from polyrl.policy.loading import Policy

    model = copy.deepcopy(policy.model)
    suite = parse_suite({"tasks": [{"name": "addition", "difficulties": ["easy"], "n": 3}], "max_new_tokens": 6})
    with second_device(model) as guard:
        source = LocalModelSource(Policy(model, policy.tokenizer, guard.device), "question", None)
        results = run_suite(suite, source, tmp_path / "ev", "question", "tiny", False)
    assert results["problems_done"] == 3


@pytest.mark.parametrize(
    "updates",
    [
        {"rl__kl_coef": 0.05},
        {"rl__advantage": "gae", "rl__critic": {"warmup_steps": 1}},
        {"rl__gradient_surgery": "pcgrad", "model": {"path": "tiny", "tiny": TINY, "lora": {"enabled": True}}},
    ],
    ids=["kl-reference", "ppo-critic", "lora-pcgrad"],
)
def test_a_whole_run_keeps_every_tensor_on_the_placements_device(tiny_train_config, updates):
    """SFT, the after-SFT evaluation, RL with its reference or critic, the after-RL evaluation and the saved
    models, with the placement's device the pretend one: the Trainer, its stages and the learner hand every
    tensor the device the placement owns."""
    from polyrl.train.placement import LocalPlacement
    from polyrl.train.trainer import Trainer

    config = tiny_train_config(sft__steps=2, rl__steps=2, tensorboard=False, **updates)
    with second_device() as guard:
        trainer = Trainer(config, placement=LocalPlacement(guard.device))
        assert trainer.placement.device == DEVICE and trainer.parts.policy.device == DEVICE
        assert all(on_device(p) for p in trainer.parts.policy.model.parameters())
        results = trainer.run()
    assert set(results) >= {"after_sft", "after_rl"}


# -- memory.py ----------------------------------------------------------------------------------------------------


def _memory_module(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # memory.py imports benchmarks/machine.py
    spec = importlib.util.spec_from_file_location("bench_memory", REPO / "benchmarks" / "memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("setting", ["before", "chunked", "micro", "checkpointing", "bf16-autocast", "all"])
def test_every_polyrl_setting_of_the_memory_benchmark_updates_on_the_device(setting, monkeypatch):
    memory = _memory_module(monkeypatch)
    args = memory.parse_args(["--hidden", "64", "--layers", "1", "--group-size", "4", "--length", "48"])
    args.prompt_length, args.micro_batch_tokens = 8, 96
    with second_device() as guard:
        args.device = guard.device
        step = memory.polyrl_update(args, setting)
        result = step()
        assert guard.checked > 50
    assert result.updates == 1 and not result.skipped_updates
