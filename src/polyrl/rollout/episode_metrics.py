"""Per-environment episode statistics of a step (success, turns, tool use, tokens, end reasons)."""

from __future__ import annotations

from polyrl.rollout.trajectory import Trajectory

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
