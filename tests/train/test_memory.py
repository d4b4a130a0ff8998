"""Memory and precision switches: chunked log-probs from hidden states, micro-batched SFT and critic,
autocast, gradient checkpointing and the LoRA reference without a copy."""

import copy
import warnings

import pytest
import torch

from polyrl.critic import Critic, CriticConfig
from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.forward import collate, sequence_logprobs
from polyrl.forward.token_scores import scores_from_hidden, split_lm
from polyrl.learner import ONE_PROCESS, sft_step
from polyrl.learner.settings import UpdateSettings
from polyrl.learner.update import BaseModelReference, _frozen_logprobs, policy_update
from polyrl.learner.update_batch import prepare_update
from polyrl.policy.loading import ModelConfig, load_policy
from polyrl.rollout import Trajectory
from polyrl.tasks import Problem, Verdict
from polyrl.train.config import RLConfig

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}


def _step() -> list[Trajectory]:
    """Three groups of four (two tasks) with shared prompts of 3–5 tokens, responses of 2–6 tokens, mixed rewards."""
    g = torch.Generator().manual_seed(0)
    trajs = []
    for group in range(3):
        task = "a" if group < 2 else "b"
        prompt = torch.randint(3, 40, (3 + group,), generator=g).tolist()
        problem = Problem(task, "q", "q", None, None, 0, "train", 0.0, {})
        for k in range(4):
            response = torch.randint(3, 40, (2 + (k + group) % 5,), generator=g).tolist()
            reward = float((k + group) % 2)
            verdict = Verdict(reward, reward >= 1, "correct" if reward >= 1 else "wrong")
            trajs.append(Trajectory(task, group, problem, prompt, response, "", True, reward, {}, verdict))
    return trajs


def _policy(**model):
    return load_policy(ModelConfig(path="tiny", tiny=TINY, **model), seed=0, device=HOST)


def _naive(hidden, targets, head, temperature):
    logp_all = torch.log_softmax(head(hidden).float() / temperature, -1)
    return logp_all.gather(-1, targets[:, None]).squeeze(-1), -(logp_all.exp() * logp_all).sum(-1)


def test_chunked_scores_equal_the_full_log_softmax_and_its_gradients():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden = torch.randn(37, 8, requires_grad=True)
    targets = torch.randint(0, 50, (37,))
    # 7 positions of 50 float32 logits per chunk: six chunks, each recomputed in the backward
    logp, ent = scores_from_hidden(
        hidden, targets, head, temperature=0.7, entropy=True, chunk_bytes=7 * 50 * 4, entropy_grad=True
    )
    (logp.sum() + 0.3 * ent.sum()).backward()
    chunked_grads = hidden.grad.clone(), head.weight.grad.clone()
    hidden.grad, head.weight.grad = None, None
    ref_logp, ref_ent = _naive(hidden, targets, head, 0.7)
    (ref_logp.sum() + 0.3 * ref_ent.sum()).backward()
    torch.testing.assert_close(logp, ref_logp)
    torch.testing.assert_close(ent, ref_ent)
    torch.testing.assert_close(chunked_grads[0], hidden.grad)
    torch.testing.assert_close(chunked_grads[1], head.weight.grad)


def test_an_entropy_without_entropy_grad_is_detached():
    head = torch.nn.Linear(8, 50, bias=False)
    logp, ent = scores_from_hidden(torch.randn(20, 8), torch.zeros(20, dtype=torch.long), head, 1.0, entropy=True)
    assert logp.requires_grad and not ent.requires_grad


def _saved_bytes(fn) -> int:
    """Bytes of the tensors autograd saves for the backward while ``fn`` runs."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def test_chunked_scores_keep_no_full_vocabulary_logits_for_the_backward():
    head = torch.nn.Linear(16, 4000, bias=False)
    hidden = torch.randn(256, 16, requires_grad=True)
    targets = torch.randint(0, 4000, (256,))
    full_logits = 256 * 4000 * 4
    naive = _saved_bytes(lambda: _naive(hidden, targets, head, 1.0))
    chunked = _saved_bytes(
        lambda: scores_from_hidden(hidden, targets, head, 1.0, entropy=True, chunk_bytes=32 * 4000 * 4)
    )
    assert naive >= full_logits
    assert chunked < full_logits / 4  # the hidden states and small per-chunk tensors, no [256, 4000] logits


@pytest.mark.parametrize("share_prompts", [True, False])
def test_sequence_logprobs_equal_the_full_logits_at_temperature(share_prompts, monkeypatch):
    import polyrl.forward.token_scores as token_scores

    monkeypatch.setattr(token_scores, "LOGIT_CHUNK_BYTES", 5 * 110 * 4)  # five positions per chunk
    model = _policy().model
    seqs = [([5, 6, 7, 8], [9, 10, 11]), ([5, 6, 7, 8], [12, 13]), ([5, 6, 7, 8], [14, 15, 16, 17]), ([20], [22])]
    batch = collate(seqs, 0)
    logp, ent = sequence_logprobs(model, batch, 0.8, entropy=True, share_prompts=share_prompts)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1] / 0.8
    logp_all = torch.log_softmax(logits, -1)
    mask = batch.loss_mask
    ref = logp_all.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(logp * mask, ref * mask, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent * mask, -(logp_all.exp() * logp_all).sum(-1) * mask, atol=1e-5, rtol=1e-5)


def test_split_lm_finds_the_trunk_and_head_of_a_peft_model():
    model = _policy(lora={"enabled": True, "r": 2, "alpha": 4}).model
    split = split_lm(model)
    assert split is not None and split.head is model.get_base_model().lm_head
    assert any("lora" in name for name, _ in split.backbone.named_parameters())  # adapters run in the trunk


def _sequences():
    return [([5, 6, 7], [8, 9, 10, 2]), ([5, 6], [11, 2]), ([12, 13, 14, 15], [16, 17, 18, 19, 20, 2]), ([5], [9, 2])]


def _sft_params(micro_batch_tokens):
    model = copy.deepcopy(_policy().model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = sft_step(model, optimizer, list(model.parameters()), 0, _sequences(), micro_batch_tokens, HOST)
    return loss, list(model.parameters())


def test_sft_micro_batches_give_the_unsplit_step():
    whole_loss, whole = _sft_params(None)
    split_loss, split = _sft_params(12)  # the 11-token row alone, the others in pairs or alone
    assert split_loss == pytest.approx(whole_loss, abs=1e-6)
    for a, b in zip(whole, split):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("loss", ["mse", "hl_gauss"])
def test_critic_micro_batches_give_the_unsplit_step(loss):
    policy = _policy()
    batch = collate(_sequences(), 0)
    returns = torch.linspace(-1, 1, batch.loss_mask.numel()).reshape(batch.loss_mask.shape)
    results = []
    for budget in (None, 12):
        critic = Critic(CriticConfig(loss=loss, lr=1e-2), policy.model, device=HOST)
        critic.model.head.weight.data.normal_(generator=torch.Generator().manual_seed(0))  # a non-zero head
        critic.optimizer = torch.optim.SGD(critic.model.parameters(), lr=0.5)  # the step is the gradient
        value = critic.update(batch, returns, micro_batch_tokens=budget)
        results.append((value, [p.detach().clone() for p in critic.model.parameters()]))
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-5)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def _rl_update(model, cfg=None):
    model = copy.deepcopy(model)
    cfg = cfg or RLConfig(skip_zero_advantage=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    batch = prepare_update(_step(), ["a", "b"], 0, UpdateSettings.from_config(cfg))
    return policy_update(
        model, optimizer, batch, UpdateSettings.from_config(cfg), list(model.parameters()), device=HOST
    ), model


def test_bf16_autocast_on_cpu_trains_float32_weights_with_a_loss_close_to_float32():
    fp32, _ = _rl_update(_policy().model)
    mixed, model = _rl_update(_policy(autocast="bf16").model)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay float32
    assert mixed.loss == pytest.approx(fp32.loss, abs=2e-2)
    assert mixed.grad_norm == pytest.approx(fp32.grad_norm, rel=0.1)


def test_pure_bf16_trains_bf16_weights():
    result, model = _rl_update(_policy(dtype="bfloat16").model)
    assert result.skipped_updates == 0 and all(p.dtype == torch.bfloat16 for p in model.parameters())


def test_fp16_autocast_on_cpu_is_a_config_error(tiny_train_config):
    with pytest.raises(UserError, match=r"model\.autocast=fp16 needs a CUDA device"):
        tiny_train_config(model={"path": "tiny", "tiny": TINY, "autocast": "fp16"})


@pytest.mark.parametrize("share_prompts", [True, False])
def test_gradient_checkpointing_gives_the_same_update(share_prompts):
    cfg = RLConfig(skip_zero_advantage=False, epochs=2, share_prompts=share_prompts)
    plain, plain_model = _rl_update(_policy().model, cfg)
    ckpt, ckpt_model = _rl_update(_policy(gradient_checkpointing=True).model, cfg)
    assert ckpt.loss == pytest.approx(plain.loss, abs=1e-6)
    for a, b in zip(plain_model.parameters(), ckpt_model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_checkpointing_shares_prompts_only_without_gradients(monkeypatch):
    """On transformers' forward, checkpointed layers can't read a KV cache in the backward (polyrl's packed
    forward shares prompts under checkpointing too: tests/forward/test_decoder.py)."""
    import polyrl.forward.logprobs as batch_module

    model = _policy(gradient_checkpointing=True, forward="transformers").model.train()
    calls = []
    real = batch_module._shared_prompt_logprobs
    monkeypatch.setattr(batch_module, "_shared_prompt_logprobs", lambda *a: calls.append(1) or real(*a))
    batch = collate(_sequences()[:2] * 2, 0)
    sequence_logprobs(model, batch)
    with torch.no_grad():
        sequence_logprobs(model, batch)
    assert calls == [1]  # the no-grad pass shares; the pass with a backward does not


def test_lora_reference_is_the_base_model_without_a_copy(tiny_train_config):
    from polyrl.train.trainer import Trainer

    cfg = tiny_train_config(
        model={"path": "tiny", "tiny": TINY, "lora": {"enabled": True, "r": 2, "alpha": 4}}, rl__kl_coef=0.1
    )
    trainer = Trainer(cfg)
    policy = trainer.parts.policy.model
    reference = trainer.rl.reference_model()
    assert isinstance(reference, BaseModelReference) and reference.model is policy  # no second set of weights
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(generator=torch.Generator().manual_seed(1))  # the adapters now change the policy
    base = _policy().model  # the same seed: the weights LoRA was put on
    settings = UpdateSettings.from_config(cfg.rl)
    batch = prepare_update(_step(), ["a", "b"], 0, settings)
    rows, lengths = torch.arange(len(batch)), batch.tokens.attention_mask.sum(1)
    with torch.no_grad():
        ref = _frozen_logprobs(reference, batch, rows, lengths, settings, ONE_PROCESS, HOST)
        expected = _frozen_logprobs(base, batch, rows, lengths, settings, ONE_PROCESS, HOST)
        own = _frozen_logprobs(policy, batch, rows, lengths, settings, ONE_PROCESS, HOST)
    mask = batch.tokens.loss_mask
    torch.testing.assert_close(ref * mask, expected * mask, atol=1e-5, rtol=1e-5)
    assert float(((own - expected) * mask).abs().max()) > 1e-3


def test_gradient_checkpointing_takes_effect_on_a_loaded_checkpoint(tmp_path):
    """from_pretrained returns a model in eval mode, where transformers would silently not checkpoint."""
    _policy().save(tmp_path / "model")
    model = load_policy(ModelConfig(path=str(tmp_path / "model"), gradient_checkpointing=True), device=HOST).model
    assert model.training and model.is_activation_checkpointing


@pytest.mark.parametrize("forward", ["auto", "transformers"])
def test_gradient_checkpointing_uses_no_name_transformers_deprecated(forward):
    """transformers 5 renamed ``gradient_checkpointing_enable`` and ``is_gradient_checkpointing`` to
    ``activation_checkpointing_*``; the old names warn (FutureWarning) and go in v6."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        model = _policy(gradient_checkpointing=True, forward=forward).model
        sequence_logprobs(model, collate(_sequences()[:2] * 2, 0))[0].sum().backward()
