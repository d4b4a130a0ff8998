"""Held-out evaluation of a policy on the eval seed space: greedy accuracy and sampled pass@k."""

from __future__ import annotations

from typing import Any

import torch

from polyrl.eval.metrics import pass_at_k
from polyrl.policy.generation import GenerationBackend
from polyrl.policy.prompts import PromptBuilder
from polyrl.rewards import RewardConfig
from polyrl.rollout.multi_turn import rollout_mixed
from polyrl.tasks import Task


def evaluate_policy(
    backend: GenerationBackend,
    prompts: PromptBuilder,
    tasks: dict[str, tuple[Task, Any]],
    problems_per_task: int,
    max_new_tokens: int,
    pass_k: int = 1,
    temperature: float = 1.0,
    seed: int = 0,
    max_episode_tokens: int = 384,
) -> dict[str, dict[str, float]]:
    """Per task: ``accuracy`` (greedy), ``score`` (mean verifier score, greedy), ``format_rate``,
    ``mean_length`` and, with ``pass_k > 1``, ``pass@1`` (sampled) and ``pass@k``. Adds a ``mean`` row.
    Environments (``env/...`` tasks) are played as episodes of at most ``max_episode_tokens``; their
    accuracy is the success rate."""
    results: dict[str, dict[str, float]] = {}
    instances = {name: task for name, (task, _) in tasks.items()}
    reward = RewardConfig()
    for name, (task, difficulty) in tasks.items():
        problems = [task.generate(i, difficulty, split="eval") for i in range(problems_per_task)]
        greedy = rollout_mixed(
            problems, instances, backend, prompts, 1, max_new_tokens, reward, max_episode_tokens, greedy=True
        )
        row = {
            "accuracy": sum(t.verdict.correct for t in greedy) / len(greedy),
            "score": sum(t.verdict.score for t in greedy) / len(greedy),
            "format_rate": sum(t.verdict.format_ok for t in greedy) / len(greedy),
            "mean_length": sum(len(t.response_ids) for t in greedy) / len(greedy),
        }
        if pass_k > 1:
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                sampled = rollout_mixed(
                    problems,
                    instances,
                    backend,
                    prompts,
                    pass_k,
                    max_new_tokens,
                    reward,
                    max_episode_tokens,
                    temperature=temperature,
                )
            correct = [0] * len(problems)
            for t in sampled:
                correct[t.group] += int(t.verdict.correct)
            row["pass@1"] = sum(c / pass_k for c in correct) / len(problems)
            row[f"pass@{pass_k}"] = sum(pass_at_k(pass_k, c, pass_k) for c in correct) / len(problems)
        results[name] = row
    keys = next(iter(results.values())).keys()
    results["mean"] = {k: sum(r[k] for r in results.values()) / len(results) for k in keys}
    return results


def format_comparison(
    before: dict[str, dict[str, float]],
    after: dict[str, dict[str, float]],
    metric: str = "accuracy",
    labels: tuple[str, str] = ("after SFT", "after RL"),
) -> str:
    """A Markdown table of ``metric`` per task, before and after, with the difference in points."""
    lines = [f"| task | {labels[0]} | {labels[1]} | Δ |", "|---|---:|---:|---:|"]
    for name in before:
        b, a = before[name][metric], after[name][metric]
        label = f"**{name}**" if name == "mean" else name
        lines.append(f"| {label} | {100 * b:.1f}% | {100 * a:.1f}% | {100 * (a - b):+.1f} |")
    return "\n".join(lines)
