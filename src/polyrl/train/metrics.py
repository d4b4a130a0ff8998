"""Stage 5 of an RL step: what the step did, overall and per task (per-task keys are ``<metric>/<task>``).

Everything here is read off the step's trajectories (every group it generated: with dynamic sampling, the dropped
groups count like the kept ones, so that a step where a reward function failed or every episode crashed says so),
the collector's counts, the ``UpdateBatch`` and the learner's :class:`~polyrl.learner.update.UpdateResult`; nothing
is recomputed. :func:`step_metrics` is the one place a step's metrics are assembled, and its docstring names every
one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from polyrl.learner.update import UpdateResult
from polyrl.learner.update_batch import UpdateBatch
from polyrl.rollout import Trajectory
from polyrl.rollout.collect import Collected, by_group, has_signal
from polyrl.tasks.images import png_base64

VERIFIER_FAILURES = ("verifier_timeout", "verifier_error")
"""Verdict reasons of a verifier that could not finish (isolated worker timed out or crashed)."""

SAMPLE_CHARS = 400
"""Prompt and completion text kept per logged sample."""


EPISODE_MEANS = {
    "turns": "turns",
    "tool_calls": "tool_calls",
    "tool_errors": "tool_errors",
    "invalid_actions": "invalid_actions",
    "policy_tokens_per_episode": "policy_tokens",
    "env_tokens_per_episode": "env_tokens",
}
"""Metric → the episode statistic (``Trajectory.info``) it is the mean per episode of. The token means are named
apart from ``policy_tokens``, which is the step's sum (overall and per task)."""


def episode_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Per environment: ``success``, the means per episode of :data:`EPISODE_MEANS`, and the fraction of
    episodes ending for each reason (``end/<reason>/<env>``)."""
    by_env: dict[str, list[Trajectory]] = {}
    for t in trajs:
        if t.is_episode:
            by_env.setdefault(t.task, []).append(t)
    out: dict[str, float] = {}
    for name, ts in sorted(by_env.items()):
        n = len(ts)
        out[f"success/{name}"] = sum(t.verdict.correct for t in ts) / n
        for metric, key in EPISODE_MEANS.items():
            out[f"{metric}/{name}"] = sum(t.info.get(key, 0) for t in ts) / n
        for reason in sorted({t.verdict.reason for t in ts}):
            out[f"end/{reason}/{name}"] = sum(t.verdict.reason == reason for t in ts) / n
    return out


def curriculum_metrics(sampler, controller) -> dict[str, float]:
    """What the curriculum did this step: ``sampler_weight/<task>``, ``difficulty/<task>`` and the sampler's own
    :meth:`~polyrl.curriculum.samplers.TaskSampler.metrics`."""
    out = {f"sampler_weight/{t}": float(w) for t, w in zip(sampler.tasks, sampler.weights())}
    out.update(sampler.metrics())
    if controller is not None:
        out.update({f"difficulty/{t}": k for t, k in controller.knobs.items()})
    return out


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else float("nan")


def _rollout_metrics(ts: list[Trajectory], no_signal: set[int], kept: set[int]) -> dict[str, float]:
    """What the policy did on ``ts`` (every generated completion of the step, or of one task); ``no_signal``: the
    groups whose rewards are all equal, ``kept``: the groups the update trains on."""
    groups = {t.group for t in ts}
    out = {
        "reward": _mean(t.reward for t in ts),
        "accuracy": _mean(t.verdict.correct for t in ts),
        "score": _mean(t.verdict.score for t in ts),
        "format_rate": _mean(t.verdict.format_ok for t in ts),
        "response_length": _mean(len(t.response_ids) for t in ts),
        "truncation_rate": _mean(t.truncated for t in ts),
        "zero_variance_frac": len(groups & no_signal) / max(len(groups), 1),
        "groups_kept_frac": len(groups & kept) / max(len(groups), 1),
        "tokens": float(sum(len(t.response_ids) for t in ts)),
        "policy_tokens": float(sum(len(t.response_ids) if t.policy_mask is None else sum(t.policy_mask) for t in ts)),
    }
    for term in sorted({k for t in ts for k in t.reward_terms}):
        out[f"reward_terms/{term}"] = _mean(t.reward_terms.get(term, 0.0) for t in ts)
    for term in sorted({k for t in ts for k in t.reward_failures}):
        out[f"reward_failures/{term}"] = float(sum(term in t.reward_failures for t in ts))
    failures = sum(t.verdict.reason in VERIFIER_FAILURES for t in ts)
    if failures:
        for reason in VERIFIER_FAILURES:
            out[reason] = float(sum(t.verdict.reason == reason for t in ts))
    if any(t.judge_position_inconsistent for t in ts):
        out["judge_position_inconsistent"] = float(sum(t.judge_position_inconsistent for t in ts))
    return out


def _trained_metrics(rows: list[int], update: UpdateResult) -> dict[str, float]:
    """``entropy`` and ``kl`` of the kept rows ``rows`` (zero-advantage rows are skipped by the update: NaN)."""
    return {
        "entropy": _mean(x for x in (update.seq_entropy[i] for i in rows) if x == x),
        "kl": _mean(update.seq_kl[i] for i in rows),
    }


class TermFailures:
    """Each reward term's samples and failures over the run, so that a term that failed on every call — a reward
    function that always raises, returns None, or times out — is said once at the end, in one line per term
    (each step logs its count as ``reward_failures/<term>``)."""

    def __init__(self):
        self.scored: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.first: dict[str, str] = {}
        """The first failure's reason of each term."""

    def add(self, trajs: list[Trajectory]) -> None:
        """Count a step's scored trajectories (every generated one: dropped groups too)."""
        for t in trajs:
            self.scored.update(t.reward_terms.keys())
            self.failed.update(t.reward_failures.keys())
            for term, reason in t.reward_failures.items():
                self.first.setdefault(term, reason)

    def warnings(self) -> list[str]:
        """One line per term whose every sample failed."""
        return [
            f"polyrl: warning: reward term {term!r} failed on every call of the run ({n} samples, first: "
            f"{self.first[term]}): it added 0 to every reward"
            for term, n in sorted(self.failed.items())
            if n >= self.scored[term]
        ]


def samples(trajs: list[Trajectory], per_task: int = 1) -> list[dict[str, Any]]:
    """A few completions of the step with their rewards, for the metrics file and the report: the first
    ``per_task`` of each task with the prompt the policy read (the run's prompt field and style, e.g. the natural
    statement a real model reads), text cut to :data:`SAMPLE_CHARS` characters, and the problem's images, whole, as
    base64 PNG text (``images``, only where it has images); an episode whose observations showed pictures adds them,
    whole and in turn order (``observation_images``: ``{"turn": k, "images": [...]}``, the observation after policy
    turn ``k``)."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for t in trajs:
        if seen[t.task] >= per_task:
            continue
        seen[t.task] += 1
        sample = {
            "task": t.task,
            "prompt": t.shown_prompt[:SAMPLE_CHARS],
            "completion": t.text[:SAMPLE_CHARS],
            "reward": t.reward,
            "correct": bool(t.verdict.correct),
            "reason": t.verdict.reason,
        }
        if t.problem.images:
            sample["images"] = [png_base64(image) for image in t.problem.images]
        if t.observation_images:
            sample["observation_images"] = [
                {"turn": turn, "images": [png_base64(image) for image in images]}
                for turn, images in t.observation_images
            ]
        out.append(sample)
    return out


def step_metrics(
    collected: Collected,
    batch: UpdateBatch | None,
    update: UpdateResult | None,
    elapsed: float,
    lr: float,
    curriculum: tuple[Any, Any],
    sample_count: int = 1,
) -> dict[str, Any]:
    """Every metric one RL step logs, overall and per task (``<metric>/<task>``), in this order:

    - over every group the step generated, kept or dropped by dynamic sampling (:func:`_rollout_metrics`):
      ``reward``, ``accuracy``, ``score``, ``format_rate``, ``response_length``, ``truncation_rate``,
      ``zero_variance_frac``, ``groups_kept_frac`` (the share of the groups the update trains on), ``tokens`` and
      ``policy_tokens`` (sums), ``reward_terms/*``, ``reward_failures/*``, verifier failures,
      ``judge_position_inconsistent``;
    - over the rows trained on (:func:`_trained_metrics`): ``entropy`` and ``kl``;
    - multi-turn episode metrics over every generated episode (:func:`episode_metrics`);
    - from the update (:class:`~polyrl.learner.update.UpdateResult`): ``loss``, ``grad_norm``,
      ``skipped_updates``, ``updates``, ``trained_sequences``, every statistic the objective measured
      (overall and per task, measured once), ``value_loss``;
    - throughput and the collector: ``tokens_per_s``, ``completions_per_s``, ``step_time``,
      ``groups_dropped``, ``source/<kind>``, the backend's and the collector's extras; ``samples``;
    - from the batch: the critic's statistics (GAE) and ``adv_abs_sum/<task>`` (:func:`advantage_mass`);
    - ``lr`` (after the step's schedule step) and the curriculum (``sampler_weight/<task>``,
      ``difficulty/<task>``, the sampler's own), from ``curriculum = (sampler, difficulty controller)``.
    """
    kept, generated = collected.trajectories, collected.generated
    no_signal = {g[0].group for g in by_group(generated) if not has_signal(g)}
    kept_groups = {t.group for t in kept}
    out = _per_task(generated, lambda ts: _rollout_metrics(ts, no_signal, kept_groups))
    if update is not None:
        index = {id(t): i for i, t in enumerate(kept)}
        out.update(_per_task(kept, lambda ts: _trained_metrics([index[id(t)] for t in ts], update)))
    out.update(episode_metrics(generated))
    if update is not None:
        out.update(_update_metrics(update))
    out["tokens_per_s"] = collected.gen_tokens / max(collected.gen_time, 1e-9)
    out["completions_per_s"] = len(generated) / max(elapsed, 1e-9)
    out["step_time"] = elapsed
    out["groups_dropped"] = collected.groups_dropped
    for kind in sorted({t.problem.source for t in generated}):  # where the step's problems came from
        out[f"source/{kind}"] = sum(t.problem.source == kind for t in generated) / len(generated)
    out.update(collected.backend)
    out.update(collected.extra)
    if sample_count:
        out["samples"] = samples(generated, sample_count)
    if batch is not None:
        out.update(batch.critic_stats)
        out.update(advantage_mass(batch.advantages, batch.tokens.loss_mask, batch.task_ids, batch.task_names))
    out["lr"] = lr
    out.update(curriculum_metrics(*curriculum))
    return out


def _per_task(trajs: list[Trajectory], metrics: Callable[[list[Trajectory]], dict[str, Any]]) -> dict[str, Any]:
    """``metrics`` over the whole of ``trajs``, then over each task's (as ``<metric>/<task>``); nothing when empty."""
    by_task: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        by_task[t.task].append(t)
    out: dict[str, Any] = metrics(trajs) if trajs else {}
    for name, ts in sorted(by_task.items()):
        out.update({f"{k}/{name}": v for k, v in metrics(ts).items()})
    return out


def _update_metrics(update: UpdateResult) -> dict[str, float]:
    out = {"loss": update.loss, "grad_norm": update.grad_norm, "skipped_updates": update.skipped_updates}
    out.update({"updates": update.updates, "trained_sequences": update.trained_sequences})
    out.update(update.objective)
    for task, stats in update.objective_by_task.items():
        out.update({f"{k}/{task}": v for k, v in stats.items()})
    if update.value_loss == update.value_loss:
        out["value_loss"] = update.value_loss
    return out


def advantage_mass(advantages, loss_mask, task_ids, task_names: list[str]) -> dict[str, float]:
    """``adv_abs_sum/<task>``: the step's sum over the task's response tokens of |advantage|, a proxy for the
    share of the policy gradient each task receives (the policy-gradient term of a token is its advantage
    times the gradient of its log-probability). ``advantages`` is ``[N]`` per sequence or ``[N, T]`` per token."""
    mask = loss_mask.float()
    per_token = advantages.abs().unsqueeze(1) * mask if advantages.dim() == 1 else advantages.abs() * mask
    per_row = per_token.sum(1)
    return {f"adv_abs_sum/{name}": float(per_row[task_ids == i].sum()) for i, name in enumerate(task_names)}
