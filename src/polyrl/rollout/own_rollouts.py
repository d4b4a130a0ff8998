"""Task kinds that bring their own rollout (``task.play(problems, tasks, backend, prompts, group_size,
max_new_tokens, reward, max_episode_tokens, **sampling)``, e.g. :mod:`polyrl.harness`), routed beside the
single-turn and environment problems of the same step."""

from __future__ import annotations

from polyrl.rollout.trajectory import Trajectory
from polyrl.tasks import Problem


def with_own_rollouts(own: list[int], problems: list[Problem], tasks: dict, play_rest, play_own) -> list[Trajectory]:
    """Problems of tasks that play their own rollouts (``task.play``, the harness kind) through
    ``play_own(task, problems)`` and the rest through ``play_rest(problems)``, back in problem order with
    their group indices."""
    mine = set(own)
    rest = [i for i in range(len(problems)) if i not in mine]
    by_task: dict[str, list[int]] = {}
    for i in own:
        by_task.setdefault(problems[i].task, []).append(i)
    parts = [(rest, play_rest([problems[i] for i in rest]) if rest else [])]
    parts += [(idx, play_own(tasks[name], [problems[i] for i in idx])) for name, idx in by_task.items()]
    out: dict[int, list[Trajectory]] = {}
    for idx, trajs in parts:
        for t in trajs:
            t.group = idx[t.group]
            if t.policy_mask is None:  # explicit all-policy masks, so a mixed batch collates one mask per row
                t.policy_mask = [1] * len(t.response_ids)
            out.setdefault(t.group, []).append(t)
    return [t for g in sorted(out) for t in out[g]]
