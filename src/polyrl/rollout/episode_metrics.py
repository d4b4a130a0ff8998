"""Per-environment episode statistics of a step (success, turns, tool use, tokens, end reasons)."""

from __future__ import annotations

from polyrl.rollout.trajectory import Trajectory

EPISODE_METRICS = ("turns", "tool_calls", "tool_errors", "invalid_actions", "policy_tokens", "env_tokens")


def episode_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """Per environment: ``success``, mean turns, tool calls, tool errors, invalid actions and tokens, and the
    fraction of episodes ending for each reason (``end/<reason>/<env>``)."""
    by_env: dict[str, list[Trajectory]] = {}
    for t in trajs:
        if t.is_episode:
            by_env.setdefault(t.task, []).append(t)
    out: dict[str, float] = {}
    for name, ts in sorted(by_env.items()):
        n = len(ts)
        out[f"success/{name}"] = sum(t.verdict.correct for t in ts) / n
        for key in EPISODE_METRICS:
            out[f"{key}/{name}"] = sum(t.info.get(key, 0) for t in ts) / n
        for reason in sorted({t.verdict.reason for t in ts}):
            out[f"end/{reason}/{name}"] = sum(t.verdict.reason == reason for t in ts) / n
    return out
