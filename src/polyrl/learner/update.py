"""Stage 4 of an RL step: the policy update.

``policy_update`` runs epochs × minibatches × micro-batches of the registered objective on an
:class:`~polyrl.learner.update_batch.UpdateBatch` (built by ``prepare_update``) and returns everything the
objective measured. It does not see the Trainer or the config: it takes the model, optimizer, batch, the
frozen :class:`~polyrl.learner.settings.UpdateSettings` built once from the config, and the device the model
is on. The batch stays on the host, where it is split; each micro-batch moves to the device with one
``.to(device)`` and everything computed from it stays there until its statistics are read, once per micro-batch.

Normalization is over the whole minibatch, never per micro-batch: every micro-batch's loss is divided by
the minibatch's token and sequence counts (``ObjectiveInputs.total_tokens`` / ``total_sequences``), so the
accumulated gradient equals the unsplit one. Leaving zero-advantage rows out (they add nothing to the
surrogate) uses the same totals: the skipped rows still count in the normalizer, so the gradient is the
full batch's.

The processes the update runs on are one :class:`~polyrl.learner.ranks.Ranks` (``ranks``): in one process
(:data:`~polyrl.learner.ranks.ONE_PROCESS`) every share is the whole batch and every collective hands its input back.
Across ranks (FSDP) every rank holds the whole step's batch and computes the same advantages, minibatches and
totals; each runs forward/backward on its share of each minibatch only, every rank as many passes
(``Ranks.lockstep``), and the gradients are summed by FSDP — the one-process update, split.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from polyrl.algos import (
    ObjectiveInputs,
    ObjectiveSettings,
    aggregate,
    get_objective,
    kl_penalty,
    objective_totals,
)
from polyrl.algos.gradient_surgery import get_surgery
from polyrl.algos.objective_stats import StatMeans, logprob_mismatch, read_stats
from polyrl.algos.objectives import loss_mask
from polyrl.forward.batch import length_ordered, pack_rows
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.learner.ranks import ONE_PROCESS, Ranks, idle_pass
from polyrl.learner.settings import UpdateSettings
from polyrl.learner.update_batch import UpdateBatch
from polyrl.optim import clip_and_step


@dataclass
class UpdateResult:
    """What one policy update did and measured."""

    loss: float
    grad_norm: float
    updates: int
    """Optimizer steps attempted (epochs × minibatches)."""
    skipped_updates: int
    """Of those, steps skipped for a non-finite loss or gradient."""
    trained_sequences: int
    objective: dict[str, float]
    """Every statistic the objective computed, over the whole update (token-weighted; ``*_max``/``*_min``
    as the extreme)."""
    objective_by_task: dict[str, dict[str, float]]
    seq_entropy: list[float]
    """Per row of the batch: mean token entropy (NaN for rows not trained on)."""
    seq_kl: list[float]
    """Per row: mean token KL to the reference (0 without a reference)."""
    value_loss: float = float("nan")


# ---------------------------------------------------------------------------------------------------------
# Splitting: minibatches of a fixed count, micro-batches of a token budget


def minibatches(rows: Tensor, count: int, generator: torch.Generator | None = None) -> list[Tensor]:
    """``rows`` shuffled into ``min(count, len(rows))`` near-equal minibatches: the number of optimizer steps
    per epoch is ``count`` whatever share of the batch is trained on."""
    if len(rows) == 0:
        return []
    perm = rows[torch.randperm(len(rows), generator=generator)]
    return [chunk for chunk in torch.tensor_split(perm, min(count, len(rows)))]


def micro_batches(rows: Tensor, lengths: Tensor, group_ids: Tensor, budget: int | None) -> Iterator[Tensor]:
    """Consecutive pieces of ``rows`` whose padded size (rows × longest sequence) stays within ``budget``
    tokens (a row longer than the budget goes alone); rows of one group are kept together where they fit,
    so the shared-prompt forward still shares, and groups of similar length share a piece (less padding).
    ``budget=None``: the whole minibatch at once."""
    if budget is None:
        yield rows
        return
    yield from pack_rows(length_ordered(rows, lengths, group_ids), lengths, budget)


# ---------------------------------------------------------------------------------------------------------
# The update


def _inputs(micro: UpdateBatch, logp: Tensor, totals) -> ObjectiveInputs:
    """What the objective reads of a micro-batch on the device (its old log-probs: the update's own forward,
    detached, when the update steps once)."""
    return ObjectiveInputs(
        logprobs=logp,
        old_logprobs=micro.old_logprobs if micro.old_logprobs is not None else logp.detach(),
        advantages=micro.advantages,
        mask=micro.tokens.loss_mask.to(logp.dtype),
        behaviour_logprobs=micro.behaviour_logprobs,
        truncated=micro.truncated,
        total_tokens=totals[0],
        total_sequences=totals[1],
    )


def objective_settings_for(settings: UpdateSettings, has_behaviour_logprobs: bool) -> ObjectiveSettings:
    """The objective's settings for one batch: truncated importance sampling (``settings.tis_cap``) only where the
    batch was sampled by other weights (it carries behaviour log-probs); in-process rollouts are on-policy."""
    if not has_behaviour_logprobs or settings.tis_cap is None:
        return settings.objective_settings
    return dataclasses.replace(settings.objective_settings, tis_cap=settings.tis_cap)


def _totals(batch: UpdateBatch, rows: Tensor, settings: ObjectiveSettings) -> tuple[Tensor, Tensor]:
    """The loss's token and sequence counts over ``rows``."""
    return objective_totals(batch.tokens.loss_mask[rows], batch.truncated[rows], settings)


@dataclass
class _Pass:
    """What every micro-batch of one update reads (the model, the batch, the frozen log-probs) and what it
    adds to (the statistics)."""

    model: torch.nn.Module
    batch: UpdateBatch
    """The whole step's batch, on the host (its old and reference log-probs filled in)."""
    settings: UpdateSettings
    objective: object
    objective_settings: ObjectiveSettings
    lengths: Tensor
    device: torch.device
    overall: StatMeans = field(default_factory=StatMeans)
    by_task: dict[str, StatMeans] = field(default_factory=lambda: defaultdict(StatMeans))
    seq_entropy: Tensor | None = None
    seq_kl: Tensor | None = None
    ranks: Ranks = ONE_PROCESS
    """The processes the update is split across (one, or the ranks of a sharded model)."""

    def backward(self, rows: Tensor, totals, first_epoch: bool) -> float:
        """Forward/backward of ``rows`` in micro-batches, each normalized by the minibatch ``totals``; the summed
        loss (gradients accumulate in ``.grad``)."""
        total = 0.0
        for piece in _pieces(rows, self.lengths, self.batch.group_ids, self.settings.micro_batch_tokens, self.ranks):
            if piece is None:  # another rank has one more micro-batch: keep FSDP's collectives in step
                idle_pass(self.model, self.batch.tokens.input_ids, self.device, backward=True)
                continue
            loss = self._micro_loss(piece, totals, first_epoch)
            loss.backward()
            total += float(loss.detach())
        return total

    def _micro_loss(self, rows: Tensor, totals, first_epoch: bool) -> Tensor:
        st = self.settings
        micro = self.batch.rows(rows).to(self.device)
        logp, ent = sequence_logprobs(
            self.model,
            micro.tokens,
            st.temperature,
            entropy=True,
            entropy_grad=st.entropy_coef != 0,
            share_prompts=st.share_prompts and not self.ranks.sharded,
        )
        inputs = _inputs(micro, logp, totals)
        loss, stats = self.objective(inputs, self.objective_settings)
        if inputs.behaviour_logprobs is not None:  # how far the sampler's log-probs are from the trainer's
            stats = {**stats, **logprob_mismatch(inputs.behaviour_logprobs, inputs.old_logprobs, inputs.mask)}
        shared = self.objective_settings  # the KL and entropy terms aggregate as the policy loss does
        mask = loss_mask(inputs.mask, inputs.truncated, shared.mask_truncated)
        kl_tok = None
        if micro.ref_logprobs is not None:
            kl_tok = kl_penalty(logp, micro.ref_logprobs, st.kl_estimator)
            loss = loss + st.kl_coef * aggregate(kl_tok, mask, shared.aggregation, shared.max_tokens, *totals)
        if st.entropy_coef:
            loss = loss - st.entropy_coef * aggregate(ent, mask, shared.aggregation, shared.max_tokens, *totals)
        with torch.no_grad():
            # the same statistics over each task's rows (the task ids are read on the host: no device sync)
            tasks = {
                self.batch.task_names[t]: micro.task_ids == t for t in self.batch.task_ids[rows].unique().tolist()
            }
            overall, weight, by_task = read_stats(stats, mask, tasks, self.device)
            self.overall.add(overall, weight)
            for task, (values, task_weight) in by_task.items():
                self.by_task[task].add(values, task_weight)
            if first_epoch:
                denom = mask.sum(1).clamp(min=1)
                at = rows.to(self.device)
                self.seq_entropy[at] = (ent.detach() * mask).sum(1) / denom
                if kl_tok is not None:
                    self.seq_kl[at] = (kl_tok.detach() * mask).sum(1) / denom
        return loss

    def merge_ranks(self) -> None:
        """Every rank's statistics and per-row entropies/KLs, combined (each rank measured its own rows; one
        process: its own, unchanged)."""
        parts = self.ranks.gather(
            (
                (dict(self.overall.sums), dict(self.overall.weights)),
                {k: (dict(v.sums), dict(v.weights)) for k, v in self.by_task.items()},
            )
        )
        self.overall, self.by_task = StatMeans(), defaultdict(StatMeans)
        for (sums, weights), tasks in parts:
            self.overall.absorb(sums, weights)
            for name, (t_sums, t_weights) in tasks.items():
                self.by_task[name].absorb(t_sums, t_weights)
        self.seq_entropy = self.ranks.merge_rows(self.seq_entropy.cpu())
        self.seq_kl = self.ranks.sum_rows(self.seq_kl.cpu())

    def backward_with_surgery(self, rows: Tensor, totals, first_epoch: bool, parameters, surgery, generator) -> float:
        """One backward per task of ``rows`` (the same rows, grouped by task), then the task gradients combined
        by ``surgery`` (PCGrad, CAGrad…) into ``.grad``."""
        task_ids = self.batch.task_ids[rows]
        grads, total = [], 0.0
        for task in task_ids.unique().tolist():
            for p in parameters:
                p.grad = None
            total += self.backward(rows[task_ids == task], totals, first_epoch)
            grads.append(
                torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in parameters])
            )
        combined = surgery(torch.stack(grads), generator)
        offset = 0
        for p in parameters:
            p.grad = combined[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        return total


def _prepare(model, batch: UpdateBatch, settings: UpdateSettings, reference, ranks, device) -> tuple[_Pass, tuple]:
    """The update's pass (with the frozen log-probs it needs) and how much larger the full batch's normalizer
    is than the trained rows' (1 unless rows are skipped)."""
    objective_settings = objective_settings_for(settings, batch.behaviour_logprobs is not None)
    n_all, active = len(batch), batch.active
    lengths = batch.tokens.attention_mask.sum(1)
    all_tokens, all_seqs = _totals(batch, torch.arange(n_all), objective_settings)
    act_tokens, act_seqs = _totals(batch, active, objective_settings)
    share = (all_tokens / act_tokens.clamp(min=1), all_seqs / act_seqs.clamp(min=1))
    # one epoch of one minibatch: the frozen log-probs are the update's own forward, detached (TIS included)
    needs_old = settings.epochs > 1 or settings.minibatches > 1
    with torch.no_grad():  # in micro-batches too: these passes must not hold more than the update does
        frozen = lambda source: _frozen_logprobs(source, batch, active, lengths, settings, ranks, device)
        batch = dataclasses.replace(
            batch,
            old_logprobs=frozen(model) if needs_old and len(active) else None,
            ref_logprobs=frozen(reference) if reference is not None and len(active) else None,
        )
    objective = get_objective(settings.objective)
    run = _Pass(model, batch, settings, objective, objective_settings, lengths, device, ranks=ranks)
    run.seq_entropy = torch.full((n_all,), float("nan"), device=device)
    run.seq_kl = torch.zeros(n_all, device=device)
    return run, share


def policy_update(
    model,
    optimizer,
    batch: UpdateBatch,
    settings: UpdateSettings,
    parameters: list[Tensor],
    *,
    reference=None,
    critic=None,
    device: torch.device | str,
    generator: torch.Generator | None = None,
    ranks: Ranks = ONE_PROCESS,
) -> UpdateResult:
    """``settings.epochs`` passes over ``batch``'s active rows in ``settings.minibatches`` optimizer steps each, every
    minibatch accumulated over micro-batches of at most ``settings.micro_batch_tokens`` padded tokens (and, with
    ``settings.gradient_surgery``, per task, the task gradients combined before the step).

    ``parameters`` are the ones the optimizer trains (gradient clipping); ``reference`` is the frozen KL
    reference (with ``settings.kl_coef > 0``); ``critic`` gets one value update per minibatch (GAE). ``ranks``: the
    processes the update is split across; each trains its share of each minibatch (a sharded run has no critic or
    gradient surgery; the config refuses them). ``device``: where the model (and
    the reference) are; each micro-batch moves there."""
    device = torch.device(device)
    run, share = _prepare(model, batch, settings, reference, ranks, device)
    batch = run.batch
    active, objective_settings = batch.active, run.objective_settings
    surgery = None if settings.gradient_surgery == "none" else get_surgery(settings.gradient_surgery)

    losses, grad_norms, value_losses, skipped, updates = [], [], [], 0, 0
    for epoch in range(settings.epochs if len(active) else 0):
        for mb in minibatches(active, settings.minibatches, generator):
            updates += 1
            mb_tokens, mb_seqs = _totals(batch, mb, objective_settings)
            totals = (mb_tokens * share[0], mb_seqs * share[1])
            optimizer.zero_grad(set_to_none=True)
            if surgery is None:  # this rank's rows; the loss summed over ranks (the same skip decision everywhere)
                total = ranks.sum(run.backward(ranks.mine(mb), totals, epoch == 0))
            else:
                total = run.backward_with_surgery(mb, totals, epoch == 0, parameters, surgery, generator)
            if critic is not None and batch.returns is not None:
                value_losses.append(
                    critic.update(batch.tokens.select(mb), batch.returns[mb], settings.micro_batch_tokens)
                )
            grad_norm = clip_and_step(optimizer, parameters, settings.max_grad_norm, torch.tensor(total))
            if grad_norm is None:
                skipped += 1
                warnings.warn("non-finite loss or gradient: update skipped", stacklevel=1)
                continue
            losses.append(total)
            grad_norms.append(grad_norm)
    run.merge_ranks()
    return UpdateResult(
        loss=_mean(losses),
        grad_norm=_mean(grad_norms),
        updates=updates,
        skipped_updates=skipped,
        trained_sequences=len(active),
        objective=run.overall.result(),
        objective_by_task={name: s.result() for name, s in run.by_task.items()},
        seq_entropy=run.seq_entropy.cpu().tolist(),
        seq_kl=run.seq_kl.cpu().tolist(),
        value_loss=_mean(v for v in value_losses if v is not None),
    )


def critic_update(
    critic, batch: UpdateBatch, settings: UpdateSettings, generator: torch.Generator | None = None
) -> dict[str, float]:
    """One pass of value-loss updates over ``batch`` in ``settings.minibatches`` minibatches; the policy is untouched."""
    losses = [
        critic.update(batch.tokens.select(mb), batch.returns[mb], settings.micro_batch_tokens)
        for mb in minibatches(torch.arange(len(batch)), settings.minibatches, generator)
    ]
    return {**batch.critic_stats, "value_loss": _mean(v for v in losses if v is not None)}


@dataclass(frozen=True)
class BaseModelReference:
    """The KL reference of a LoRA policy: its own base model, i.e. the policy with its adapters switched off
    for the reference pass (TRL does the same) — no second copy of the weights."""

    model: torch.nn.Module


def _frozen_logprobs(
    source, batch: UpdateBatch, rows: Tensor, lengths: Tensor, settings: UpdateSettings, ranks, device
) -> Tensor:
    """``[N, T]`` no-grad log-probs of ``rows`` under ``source`` (the policy before the update, the KL
    reference, or a :class:`BaseModelReference`), computed on ``device`` in the update's micro-batches and kept
    on the host with the batch (across ranks: each rank its share, then summed into the whole on every rank)."""
    out = torch.zeros(batch.tokens.loss_mask.shape)
    for piece in _pieces(ranks.mine(rows), lengths, batch.group_ids, settings.micro_batch_tokens, ranks):
        if piece is None:
            model = source.model if isinstance(source, BaseModelReference) else source
            idle_pass(model, batch.tokens.input_ids, device, backward=False)
            continue
        micro = batch.tokens.select(piece).to(device)
        if isinstance(source, BaseModelReference):
            with source.model.disable_adapter():
                logp = sequence_logprobs(
                    source.model, micro, settings.temperature, share_prompts=settings.share_prompts
                )[0]
        else:
            share = settings.share_prompts and not ranks.sharded  # a sharded forward runs the same passes everywhere
            logp = sequence_logprobs(source, micro, settings.temperature, share_prompts=share)[0]
        out[piece, : logp.shape[1]] = logp.float().cpu()
    return ranks.sum_rows(out)


def _pieces(rows: Tensor, lengths: Tensor, group_ids: Tensor, budget: int | None, ranks: Ranks) -> list[Tensor | None]:
    """The micro-batches of ``rows``; across ranks, padded with None to the longest rank's count."""
    return ranks.lockstep(p for p in micro_batches(rows, lengths, group_ids, budget) if len(p))


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else float("nan")
