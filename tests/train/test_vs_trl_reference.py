"""polyrl's update held against TRL's ``GRPOTrainer`` on one batch (issue #35).

Same weights (one saved tiny Llama, loaded by each), the same sampled tokens and advantages, the same
hyperparameters (beta 0, ε / ε_high, AdamW, gradient clipping): polyrl's loss equals TRL's
``compute_loss`` (1e-5), the gradients agree (1e-4 of the largest entry), and so do AdamW's first moments
and the weights after one optimizer step — for every TRL ``loss_type`` polyrl also offers. On policy the
update runs polyrl's whole path (``prepare_update`` → ``policy_update``, settings from an ``RLConfig``); off
policy (old log-probs up to 2 nats away, so that ε, ε_high and CISPO's cap all bite) the registered objective
runs on polyrl's training log-probs. polyrl's behaviour log-probs (the sampler's) and training log-probs equal
TRL's per-token log-probs of the same tokens.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from polyrl.algos import ObjectiveInputs, get_objective
from polyrl.device import HOST
from polyrl.forward import collate, sequence_logprobs
from polyrl.learner.settings import UpdateSettings
from polyrl.learner.update import policy_update
from polyrl.learner.update_batch import prepare_update
from polyrl.optim import clip_and_step, make_optimizer
from polyrl.policy import TransformersBackend
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.rollout import Trajectory
from polyrl.tasks import Problem, Verdict
from polyrl.train.config import RLConfig

trl = pytest.importorskip("trl")

G = 4
MAX_NEW_TOKENS = 12
LR = 1e-3
MAX_GRAD_NORM = 0.05
"""Below the batch's gradient norm (~0.1–0.7): clipping is exercised."""
WEIGHT_DECAY = 0.0
"""Both trainers' default. (TRL leaves biases and norm weights out of weight decay, polyrl decays every weight.)"""
TINY = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}
QUESTIONS = ["1+2=", "sort 4213", "hello there, who"]
REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.3, 1.0], [0.0, 0.0, 0.0, 0.0]]
"""Per group: mixed rewards, partial credit, and one group without signal (its rows have zero advantage; polyrl
leaves them out of the forward but both count their tokens in the normalizer)."""

# TRL loss_type (GRPOConfig settings) ↔ polyrl (RLConfig settings)
LOSS_TYPES = {
    "dapo": ({"loss_type": "dapo"}, {"loss_aggregation": "token_mean"}),
    "bnpo": ({"loss_type": "bnpo"}, {"loss_aggregation": "token_mean"}),
    "grpo": ({"loss_type": "grpo"}, {"loss_aggregation": "seq_mean_token_mean"}),
    "dr_grpo": ({"loss_type": "dr_grpo"}, {"loss_aggregation": "seq_mean_token_sum_norm"}),
    "gspo": (
        {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
        {"objective": "gspo", "loss_aggregation": "seq_mean_token_mean"},
    ),
    "cispo": ({"loss_type": "cispo", "epsilon_high": 5.0}, {"objective": "cispo", "loss_aggregation": "token_mean"}),
}

LOSS_VALUE_DIFFERS = {"cispo"}
"""polyrl writes CISPO's token loss as ``-w·A·π/sg(π)`` (the value ``-w·A``), TRL as ``-w·A·log π``: the same
gradient, different values."""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The tiny Llama, saved once: each side loads its own copy of the same weights."""
    path = tmp_path_factory.mktemp("tiny")
    load_policy(ModelConfig(path="tiny", tiny=TINY), seed=0, device=HOST).save(path)
    return path


def _polyrl_policy(saved):
    return load_policy(ModelConfig(path=str(saved), autocast="none"), device=HOST)


@pytest.fixture(scope="module")
def sampled(saved):
    """G completions of each question sampled by polyrl's generation backend: ``(generations, tokenizer)``."""
    policy = _polyrl_policy(saved)
    prompts = [
        policy.tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, return_dict=True
        )["input_ids"]
        for q in QUESTIONS
    ]
    torch.manual_seed(0)
    gens = TransformersBackend(policy.model, policy.tokenizer, device=HOST).generate(
        [p for p in prompts for _ in range(G)], max_new_tokens=MAX_NEW_TOKENS
    )
    return gens, policy.tokenizer


@pytest.fixture(scope="module")
def trajectories(sampled):
    """The sampled completions cut to ragged lengths (3 to 12 tokens, so that a sequence mean and a token mean
    differ), scored with :data:`REWARDS`."""
    gens, _ = sampled
    out = []
    for i, gen in enumerate(gens):
        response = gen.completion_ids[: 3 + (5 * i) % 10]
        reward = REWARDS[i // G][i % G]
        problem = Problem("t", "q", "q", None, None, 0, "train", 0.0, {})
        verdict = Verdict(reward, reward >= 1, "correct" if reward >= 1 else "wrong")
        finished = gen.finished and len(response) == len(gen.completion_ids)
        out.append(Trajectory("t", i // G, problem, gen.prompt_ids, response, "", finished, reward, {}, verdict))
    return out


def _trl_trainer(saved, tokenizer, tmp_path, **config):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        bf16=False,
        activation_checkpointing=False,  # transformers 5 renamed gradient_checkpointing (deprecated, removed in v6)
        per_device_train_batch_size=len(QUESTIONS) * G,
        num_generations=G,
        max_completion_length=MAX_NEW_TOKENS,
        beta=0.0,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=WEIGHT_DECAY,
        max_grad_norm=MAX_GRAD_NORM,
        **{"epsilon": 0.2, "epsilon_high": 0.28, **config},
    )
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": q}]} for q in QUESTIONS])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = trl.GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(saved),
            reward_funcs=lambda completions, **_: [0.0] * len(completions),
            args=args,
            train_dataset=data,
            processing_class=tokenizer,
        )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train() per accumulation window
    return trainer


def _pad(rows: list[list], value, left: bool) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor(
        [[value] * (width - len(r)) + list(r) if left else list(r) + [value] * (width - len(r)) for r in rows]
    )


def _trl_inputs(trajs, advantages, pad_id) -> dict:
    """The batch as TRL's ``_generate_and_score_completions`` hands it to ``compute_loss``: prompts left-padded,
    completions right-padded, per-sequence advantages, the generation batch's completion-token count."""
    prompts, completions = [t.prompt_ids for t in trajs], [t.response_ids for t in trajs]
    return {
        "prompt_ids": _pad(prompts, pad_id, left=True),
        "prompt_mask": _pad([[1] * len(p) for p in prompts], 0, left=True),
        "completion_ids": _pad(completions, pad_id, left=False),
        "completion_mask": _pad([[1] * len(c) for c in completions], 0, left=False),
        "advantages": advantages,
        "num_items_in_batch": torch.tensor(float(sum(map(len, completions)))),
    }


def _trl_logprobs(trainer, inputs) -> torch.Tensor:
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        logp, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attention, inputs["completion_ids"].shape[1]
        )
    return logp


def _trl_step(trainer, inputs) -> float:
    """What ``Trainer.train`` does for one optimizer step (no accumulation): the loss under its context, the
    backward through accelerate, the clip, the step."""
    if trainer.optimizer is None:
        trainer.create_optimizer()
    with trainer.compute_loss_context_manager():
        loss = trainer.compute_loss(trainer.model, inputs)
    trainer.accelerator.backward(loss)
    trainer._clip_grad_norm(trainer.model)
    trainer.optimizer.step()
    return float(loss.detach())


def _to_trl_layout(values: torch.Tensor, trajs) -> torch.Tensor:
    """polyrl's ``[N, L-1]`` per-position values (response token j of row i at ``len(prompt_i) - 1 + j``) as TRL's
    ``[N, C]`` (response token j at column j)."""
    width = max(len(t.response_ids) for t in trajs)
    out = torch.zeros(len(trajs), width)
    for i, t in enumerate(trajs):
        start = len(t.prompt_ids) - 1
        out[i, : len(t.response_ids)] = values[i, start : start + len(t.response_ids)]
    return out


def _assert_same_update(polyrl_model, polyrl_optimizer, trainer):
    """Gradients (after clipping) within 1e-4 of the largest entry, AdamW's first moments likewise, and the
    weights after the step within 1e-2 of the learning rate (Adam's first step moves every weight by about ±lr)."""
    ours = dict(polyrl_model.named_parameters())
    theirs = dict(trainer.model.named_parameters())
    assert ours.keys() == theirs.keys()
    scale = max(float(p.grad.abs().max()) for p in theirs.values())
    moment_scale = max(float(trainer.optimizer.state[p]["exp_avg"].abs().max()) for p in theirs.values())
    for name, p in theirs.items():
        q = ours[name]
        assert (q.grad - p.grad).abs().max() <= 1e-4 * scale, name
        m_ours, m_theirs = polyrl_optimizer.state[q]["exp_avg"], trainer.optimizer.state[p]["exp_avg"]
        assert (m_ours - m_theirs).abs().max() <= 1e-4 * moment_scale, name
        assert (q.detach() - p.detach()).abs().max() <= 1e-2 * LR, name


def _settings(**config) -> UpdateSettings:
    rl = RLConfig(group_size=G, max_new_tokens=MAX_NEW_TOKENS, lr=LR, max_grad_norm=MAX_GRAD_NORM, **config)
    return UpdateSettings.from_config(rl)


def _polyrl_optimizer(model):
    return make_optimizer(model.parameters(), LR, warmup=0, total=1, cosine=False, weight_decay=WEIGHT_DECAY)[0]


def test_training_logprobs_equal_trls_per_token_logprobs(saved, sampled, trajectories, tmp_path):
    _, tokenizer = sampled
    policy = _polyrl_policy(saved)
    tokens = collate([(t.prompt_ids, t.response_ids) for t in trajectories], tokenizer.pad_token_id)
    with torch.no_grad():
        ours = _to_trl_layout(sequence_logprobs(policy.model, tokens, 1.0)[0], trajectories)
    trainer = _trl_trainer(saved, tokenizer, tmp_path)
    inputs = _trl_inputs(trajectories, torch.zeros(len(trajectories)), tokenizer.pad_token_id)
    theirs = _trl_logprobs(trainer, inputs) * inputs["completion_mask"]
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_behaviour_logprobs_equal_trls_per_token_logprobs(saved, sampled, tmp_path):
    gens, tokenizer = sampled
    full = [Trajectory("t", 0, None, g.prompt_ids, g.completion_ids, "", g.finished, 0.0, {}, None) for g in gens]
    trainer = _trl_trainer(saved, tokenizer, tmp_path)
    inputs = _trl_inputs(full, torch.zeros(len(full)), tokenizer.pad_token_id)
    theirs = _trl_logprobs(trainer, inputs)
    ours = _pad([g.logprobs for g in gens], 0.0, left=False).float()
    assert torch.allclose(ours, theirs * inputs["completion_mask"], atol=1e-5)


@pytest.mark.parametrize("loss_type", sorted(LOSS_TYPES))
def test_on_policy_update_equals_trls(saved, sampled, trajectories, tmp_path, loss_type):
    """polyrl's whole update path (``prepare_update`` → ``policy_update``: zero-advantage rows skipped,
    normalized by the whole batch) against TRL's ``compute_loss``, clip and AdamW step."""
    trl_config, polyrl_config = LOSS_TYPES[loss_type]
    _, tokenizer = sampled
    settings = _settings(**polyrl_config)
    batch = prepare_update(trajectories, ["t"], tokenizer.pad_token_id, settings)
    assert len(batch.active) < len(batch)  # the zero-signal group is left out of the forward

    policy = _polyrl_policy(saved)
    optimizer = _polyrl_optimizer(policy.model)
    result = policy_update(policy.model, optimizer, batch, settings, list(policy.model.parameters()), device=HOST)

    trainer = _trl_trainer(saved, tokenizer, tmp_path, **trl_config)
    loss = _trl_step(trainer, _trl_inputs(trajectories, batch.advantages, tokenizer.pad_token_id))

    assert result.updates == 1 and result.grad_norm > MAX_GRAD_NORM  # one step, clipped
    if loss_type not in LOSS_VALUE_DIFFERS:
        assert result.loss == pytest.approx(loss, abs=1e-5)
    _assert_same_update(policy.model, optimizer, trainer)


@pytest.mark.parametrize("loss_type", sorted(LOSS_TYPES))
def test_clipped_update_equals_trls_off_policy(saved, sampled, trajectories, tmp_path, loss_type):
    """Old log-probs up to 2 nats from the current ones (ratios from 0.14 to 7.4): polyrl's registered objective
    on its training log-probs against TRL's ``compute_loss`` given the same ``old_per_token_logps``."""
    trl_config, polyrl_config = LOSS_TYPES[loss_type]
    _, tokenizer = sampled
    settings = _settings(**polyrl_config, skip_zero_advantage=False)
    batch = prepare_update(trajectories, ["t"], tokenizer.pad_token_id, settings)
    shift = (torch.rand(batch.tokens.loss_mask.shape, generator=torch.Generator().manual_seed(1)) - 0.5) * 4

    policy = _polyrl_policy(saved)
    optimizer = _polyrl_optimizer(policy.model)
    logp, _ = sequence_logprobs(policy.model, batch.tokens, settings.temperature)
    old = (logp.detach() + shift) * batch.tokens.loss_mask
    inputs = ObjectiveInputs(logp, old, batch.advantages, batch.tokens.loss_mask, truncated=batch.truncated)
    loss, stats = get_objective(settings.objective)(inputs, settings.objective_settings)
    loss.backward()
    clip_and_step(optimizer, list(policy.model.parameters()), settings.max_grad_norm, loss.detach())

    trainer = _trl_trainer(saved, tokenizer, tmp_path, **trl_config)
    trl_inputs = _trl_inputs(trajectories, batch.advantages, tokenizer.pad_token_id)
    trl_loss = _trl_step(trainer, {**trl_inputs, "old_per_token_logps": _to_trl_layout(old, trajectories)})

    assert float(stats["clip_fraction_high"]) > 0  # the clip bites (ε_high; CISPO's cap)
    if settings.objective == "ppo_clip":
        assert float(stats["clip_fraction_low"]) > 0  # and ε
    if loss_type not in LOSS_VALUE_DIFFERS:
        assert float(loss) == pytest.approx(trl_loss, abs=1e-5)
    _assert_same_update(policy.model, optimizer, trainer)


def test_vs_trl_evaluates_trls_model_at_polyrls_precision(saved, monkeypatch):
    """benchmarks/vs_trl.py scores TRL's trained model under the autocast polyrl's run resolved to, as it scores
    the SFT start and polyrl's model (a model that never went through polyrl's loader would run in float32)."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    from polyrl.forward.precision import autocast_mode

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    vs_trl = pytest.importorskip("vs_trl")
    policy = _polyrl_policy(saved)
    for bf16, mode in ((True, "bf16"), (False, "none")):
        matched = vs_trl.Matched(None, {}, None, policy.tokenizer, {}, [], bf16, None)
        backend = vs_trl.eval_backend(AutoModelForCausalLM.from_pretrained(saved), matched)
        assert autocast_mode(backend.model) == mode


def test_vs_trl_gives_polyrl_set_overrides_to_polyrls_rl_stage_only(monkeypatch, tmp_path):
    """``--polyrl-set`` (repeatable) reaches polyrl's RL config and not the SFT start both trainers share."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    vs_trl = pytest.importorskip("vs_trl")
    argv = ["vs_trl.py", "--polyrl-only", "--polyrl-set", "rl.skip_zero_advantage=false", "--polyrl-set", "rl.lr=3e-4"]
    monkeypatch.setattr("sys.argv", argv)
    args, seeds = vs_trl.parse_args()
    args.seed = seeds[0]
    assert args.polyrl_only and args.polyrl_set == ["rl.skip_zero_advantage=false", "rl.lr=3e-4"]
    captured = []

    class Built(Exception):
        pass

    def trainer(cfg):
        captured.append(cfg)
        raise Built

    monkeypatch.setattr(vs_trl, "Trainer", trainer)
    with pytest.raises(Built):
        vs_trl.run_polyrl(args, tmp_path, tmp_path / "sft_model")
    assert captured[0].rl.skip_zero_advantage is False and captured[0].rl.lr == 3e-4
    sft = vs_trl.polyrl_config(args, tmp_path / "sft", ["rl.enabled=false"])
    assert sft.rl.skip_zero_advantage is True and sft.rl.lr == args.lr


def test_vs_trl_refuses_an_eval_spacing_not_below_the_rl_steps_and_says_the_range(monkeypatch, capsys):
    """``--eval-every`` equal to ``--steps`` would only repeat the final evaluation: refused with the range that is
    accepted (the message once said "between 1 and the RL steps", which included the refused value)."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    vs_trl = pytest.importorskip("vs_trl")
    monkeypatch.setattr("sys.argv", ["vs_trl.py", "--steps", "30", "--eval-every", "30"])
    with pytest.raises(SystemExit) as exit_info:
        vs_trl.parse_args()
    assert exit_info.value.code == 2
    assert "from 1 to 29" in capsys.readouterr().err
    monkeypatch.setattr("sys.argv", ["vs_trl.py", "--steps", "30", "--eval-every", "29"])
    args, _ = vs_trl.parse_args()
    assert args.eval_every == 29
