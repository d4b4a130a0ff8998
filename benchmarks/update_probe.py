"""What each optimizer step of a trainer did to the weights, measured the same way for polyrl and TRL
(benchmarks/vs_trl.py, issue #35): held side by side, these say whether the two run the same algorithm.

:class:`UpdateProbe` hooks an optimizer (``register_step_pre_hook`` / ``register_step_post_hook``) and records,
per optimizer step: the learning rate and AdamW settings it applied, the norm of the gradient it was given
(after clipping), the parameter change ``‖Δθ‖``, and ``KL(π_before ‖ π_after)`` — the exact KL over the
vocabulary at every response position of a fixed probe set (reference solutions), averaged over those
positions, in float32. :meth:`UpdateProbe.see_batch` records what the update was fed: its advantages and its
loss normalizer (the token count a token-mean loss divides by).
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch


@dataclass
class Probe:
    """Right-padded sequences and the positions whose next token is a response token (``mask[i, t]``: the
    distribution at position ``t`` predicts a response token)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor

    @classmethod
    def of(cls, pairs: list[tuple[list[int], list[int]]], pad_id: int) -> Probe:
        width = max(len(p) + len(r) for p, r in pairs)
        ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        mask = torch.zeros(len(pairs), width, dtype=torch.bool)
        for i, (p, r) in enumerate(pairs):
            ids[i, : len(p) + len(r)] = torch.tensor(p + r)
            attention[i, : len(p) + len(r)] = 1
            mask[i, len(p) - 1 : len(p) + len(r) - 1] = True
        return cls(ids, attention, mask)


@dataclass
class UpdateProbe:
    """Hooks one trainer's optimizer; ``steps`` holds one record per optimizer step, ``batches`` one per update."""

    model: torch.nn.Module
    probe: Probe
    steps: list[dict] = field(default_factory=list)
    batches: list[dict] = field(default_factory=list)
    wall: float = 0.0
    """Seconds the probe itself took inside the trainer's run (a benchmark takes them off its timing)."""
    cpu: float = 0.0

    def __post_init__(self):
        self.parameters = [p for p in self.model.parameters() if p.requires_grad]
        self.initial = [p.detach().clone() for p in self.parameters]
        self._logp = self._probe_logprobs()
        self._before: list[torch.Tensor] = []
        self._pending: dict = {}

    def watch(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.register_step_pre_hook(self._pre)
        optimizer.register_step_post_hook(self._post)

    def see_batch(self, advantages: torch.Tensor, normalizer: float) -> None:
        """What one update was fed: per-sequence advantages and the loss normalizer."""
        a = advantages.detach().float()
        self.batches.append(
            {"mean_abs_adv": float(a.abs().mean()), "normalizer": normalizer, "nonzero_rows": int((a != 0).sum())}
        )

    @contextmanager
    def _timed(self):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall += time.perf_counter() - wall
            self.cpu += time.process_time() - cpu

    def _pre(self, optimizer, args, kwargs) -> None:
        with self._timed():
            self._record_before(optimizer)

    @torch.no_grad()
    def _post(self, optimizer, args, kwargs) -> None:
        with self._timed():
            self._record_after()

    def _record_before(self, optimizer) -> None:
        group = optimizer.param_groups[0]
        grads = [p.grad for p in self.parameters if p.grad is not None]
        self._pending = {
            "lr": group["lr"],
            "betas": tuple(group["betas"]),
            "eps": group["eps"],
            "weight_decay": group["weight_decay"],
            "grad_norm_applied": float(torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads])))
            if grads
            else 0.0,
        }
        self._before = [p.detach().clone() for p in self.parameters]

    def _record_after(self) -> None:
        delta = math.sqrt(
            sum(float((p.detach() - b).float().pow(2).sum()) for p, b in zip(self.parameters, self._before))
        )
        logp = self._probe_logprobs()
        kl = (self._logp.exp() * (self._logp - logp)).sum(-1)[self.probe.mask]
        self._logp = logp
        self.steps.append({**self._pending, "delta_norm": delta, "probe_kl": float(kl.mean())})
        self._before = []

    @torch.no_grad()
    def _probe_logprobs(self) -> torch.Tensor:
        """``[N, L, V]`` float32 log-probs of the model's next-token distributions on the probe (its own forward,
        no autocast: the same measurement for either trainer)."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.autocast("cpu", enabled=False):
                logits = self.model(
                    input_ids=self.probe.input_ids, attention_mask=self.probe.attention_mask, use_cache=False
                ).logits
        finally:
            self.model.train(was_training)
        return logits.float().log_softmax(-1)

    def total_delta(self) -> float:
        """``‖θ_end − θ_start‖`` over the whole run."""
        return math.sqrt(
            sum(float((p.detach() - b).float().pow(2).sum()) for p, b in zip(self.parameters, self.initial))
        )

    def summary(self, rl_steps: int) -> dict:
        steps, batches = self.steps, self.batches
        first = steps[0] if steps else {}
        return {
            "optimizer_steps": len(steps),
            "optimizer_steps_per_rl_step": len(steps) / max(rl_steps, 1),
            "lr": sorted({s["lr"] for s in steps}),
            "adam": {k: first.get(k) for k in ("betas", "eps", "weight_decay")},
            "delta_norm": [s["delta_norm"] for s in steps],
            "probe_kl": [s["probe_kl"] for s in steps],
            "grad_norm_applied": [s["grad_norm_applied"] for s in steps],
            "total_delta": self.total_delta(),
            "mean_abs_adv": [b["mean_abs_adv"] for b in batches],
            "normalizer": [b["normalizer"] for b in batches],
            "nonzero_rows": [b["nonzero_rows"] for b in batches],
        }

    def release(self) -> None:
        """Drop the weight copies (the initial weights, the probe's log-probs)."""
        self.initial, self._logp = [], torch.empty(0)
