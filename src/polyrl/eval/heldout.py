"""Held-out evaluation of a policy on the eval seed space: greedy accuracy, sampled pass@k and, with
``attempts > 1``, multi-attempt accuracy (the env/retry protocol: a wrong answer gets the environment's
feedback and the policy answers again)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import torch

from polyrl.envs.env_registry import EnvConfig
from polyrl.envs.environment import is_environment
from polyrl.envs.retry import RetryTask
from polyrl.errors import UserError
from polyrl.eval.pass_at_k import pass_at_k
from polyrl.policy.generation import GenerationBackend
from polyrl.policy.prompts import PromptBuilder
from polyrl.rewards.stage import verify_trajectories
from polyrl.rollout import Sampling, Trajectory, rollout
from polyrl.tasks import Task
from polyrl.tasks.images import images_digest


def _played(problems, tasks, backend, prompts, sampling: Sampling, greedy: bool = False) -> list[Trajectory]:
    """The one rollout path, with each completion's verdict (held-out metrics need no reward)."""
    trajs = rollout(problems, tasks, backend, prompts, sampling, greedy=greedy)
    verify_trajectories(trajs, tasks)
    return trajs


def evaluate_policy(
    backend: GenerationBackend,
    prompts: PromptBuilder,
    tasks: dict[str, tuple[Task, Any]],
    problems_per_task: int,
    max_new_tokens: int,
    *,
    pass_k: int,
    temperature: float,
    seed: int,
    max_episode_tokens: int,
    attempts: int,
    env_concurrency: int,
    per_problem: list[dict[str, Any]] | None = None,
) -> dict[str, dict[str, float]]:
    """Per task: ``accuracy`` (greedy), ``score`` (mean verifier score, greedy), ``format_rate``,
    ``mean_length`` and, with ``pass_k > 1``, ``pass@1`` (sampled) and ``pass@k``. Adds a ``mean`` row.
    Environments (``env/...`` tasks) are played as episodes of at most ``max_episode_tokens``; their
    accuracy is the success rate; their environments step ``env_concurrency`` at a time (``env.concurrency``).
    No setting has a default here: a run passes its config's (``polyrl.train.evaluation.evaluate``).

    With ``attempts > 1`` every task is scored on its single-turn held-out problems (``env/retry:<task>`` on
    ``<task>``'s, under that name: see :func:`attempt_tasks`), and each row adds ``attempt1`` …
    ``attempt<N>``: the share of problems answered correctly within the first k greedy attempts
    (:func:`attempt_accuracy`). ``attempt1`` is ``accuracy`` (the same greedy first answer)."""
    if attempts > 1:
        tasks = attempt_tasks(tasks)
    results: dict[str, dict[str, float]] = {}
    instances = {name: task for name, (task, _) in tasks.items()}
    # top_p 1: pass@k samples the policy's whole distribution at the eval temperature (greedy ignores both)
    greedy_sampling = Sampling(1, max_new_tokens, temperature, 1.0, max_episode_tokens, env_concurrency)
    sampled_sampling = dataclasses.replace(greedy_sampling, group_size=pass_k)
    for name, (task, difficulty) in tasks.items():
        problems = [task.generate(i, difficulty, split="eval") for i in range(problems_per_task)]
        greedy = _played(problems, instances, backend, prompts, greedy_sampling, greedy=True)
        row = {
            "accuracy": sum(t.verdict.correct for t in greedy) / len(greedy),
            "score": sum(t.verdict.score for t in greedy) / len(greedy),
            "format_rate": sum(t.verdict.format_ok for t in greedy) / len(greedy),
            "mean_length": sum(len(t.response_ids) for t in greedy) / len(greedy),
        }
        if per_problem is not None:
            per_problem.extend(problem_record(name, t) for t in greedy)
        if pass_k > 1:
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                sampled = _played(problems, instances, backend, prompts, sampled_sampling)
            correct = [0] * len(problems)
            for t in sampled:
                correct[t.group] += int(t.verdict.correct)
            row["pass@1"] = sum(c / pass_k for c in correct) / len(problems)
            row[f"pass@{pass_k}"] = sum(pass_at_k(pass_k, c, pass_k) for c in correct) / len(problems)
        if attempts > 1:
            row.update(attempt_accuracy(backend, prompts, task, problems, attempts, greedy_sampling))
        results[name] = row
    keys = next(iter(results.values())).keys()
    results["mean"] = {k: sum(r[k] for r in results.values()) / len(results) for k in keys}
    return results


def problem_key(problem) -> str:
    """A short digest of what a problem is (its task, prompt and answer, and the pixels of its images where it has
    any): two evaluations whose records carry the same key scored the same problem, whatever code generated it."""
    shown = [problem.task, problem.prompt, problem.answer]
    if problem.images:  # a text problem's key is what it always was
        shown.append(images_digest(problem.images))
    text = json.dumps(shown, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def problem_record(task: str, trajectory: Trajectory) -> dict[str, Any]:
    """One greedy answer's line of ``eval/<name>.problems.jsonl``: the task it was scored under, the problem's
    eval-split seed and :func:`problem_key`, and the verdict (correct, score)."""
    problem = trajectory.problem
    return {
        "task": task,
        "seed": problem.seed,
        "key": problem_key(problem),
        "correct": bool(trajectory.verdict.correct),
        "score": float(trajectory.verdict.score),
    }


def attempt_tasks(tasks: dict[str, tuple[Task, Any]]) -> dict[str, tuple[Task, Any]]:
    """The single-turn tasks a multi-attempt evaluation scores: each task itself, or for ``env/retry:<task>``
    the wrapped ``<task>`` under its own name (so a policy trained on the retry environment and one trained
    on the plain task are scored on the same problems, under the same names). Other environments have no
    single answer to retry: a UserError, as is a task that would be scored twice."""
    out: dict[str, tuple[Task, Any]] = {}
    for name, (task, difficulty) in tasks.items():
        if isinstance(task, RetryTask):
            task = task.inner
        elif is_environment(task):
            raise UserError(
                f"eval.attempts > 1 scores single-turn answers: {name!r} is an environment "
                "(only plain tasks and env/retry:<task> can be evaluated over several attempts)"
            )
        if task.name in out:
            raise UserError(f"eval.attempts > 1 would score task {task.name!r} twice ({name!r} is {task.name!r} too)")
        out[task.name] = (task, difficulty)
    return out


def attempt_accuracy(
    backend: GenerationBackend,
    prompts: PromptBuilder,
    task: Task,
    problems: list,
    attempts: int,
    sampling: Sampling,
) -> dict[str, float]:
    """``attempt1`` … ``attempt<attempts>``: the share of ``problems`` (single-turn problems of ``task``)
    answered correctly within the first k greedy attempts. Each problem is played as an env/retry episode
    (:class:`~polyrl.envs.retry.RetryEnvironment`, so a wrong answer gets exactly the training environment's
    feedback) of at most ``attempts`` turns of ``sampling.max_new_tokens`` and ``sampling.max_episode_tokens``
    in all; an episode cut by the token budget counts as wrong from there on."""
    retry = RetryTask(task, EnvConfig(attempts=attempts))
    episodes = _played(problems, {task.name: retry}, backend, prompts, sampling, greedy=True)
    solved_at = [t.info["turns"] if t.verdict.correct else None for t in episodes]
    return {
        f"attempt{k}": sum(s is not None and s <= k for s in solved_at) / len(problems) for k in range(1, attempts + 1)
    }


def comparison_rows(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], metric: str = "accuracy"
) -> list[tuple[str, float | None, float | None, float | None]]:
    """``(task, before, after, after - before)`` of ``metric`` for every task either evaluation covers (those
    of ``before`` first), then ``mean``. A resume may change the task mix (docs/training.md, "What a resume may
    change"): a task one evaluation lacks has None there and no difference, and the two means are compared
    only when they are over the same tasks."""
    tasks = [t for t in dict.fromkeys([*before, *after]) if t != "mean"]
    same_tasks = set(before) == set(after)
    rows = []
    for task in [*tasks, "mean"]:
        b, a = before.get(task, {}).get(metric), after.get(task, {}).get(metric)
        comparable = a is not None and b is not None and (task != "mean" or same_tasks)
        rows.append((task, b, a, a - b if comparable else None))
    return rows


def format_comparison(
    before: dict[str, dict[str, float]],
    after: dict[str, dict[str, float]],
    metric: str = "accuracy",
    labels: tuple[str, str] = ("after SFT", "after RL"),
) -> str:
    """A Markdown table of ``metric`` per task, before and after, with the difference in points (rows as
    :func:`comparison_rows` gives them; "–" where there is no value)."""
    pct = lambda x: "–" if x is None else f"{100 * x:.1f}%"
    lines = [f"| task | {labels[0]} | {labels[1]} | Δ |", "|---|---:|---:|---:|"]
    for name, b, a, d in comparison_rows(before, after, metric):
        label = f"**{name}**" if name == "mean" else name
        lines.append(f"| {label} | {pct(b)} | {pct(a)} | {'–' if d is None else f'{100 * d:+.1f}'} |")
    return "\n".join(lines)
