"""The trainer's collect → score path, as the harness tests call it (importable: the harness conftest puts this
folder on the path)."""

from rollout_sampling import sampling

from polyrl.rewards import RewardConfig, score
from polyrl.rollout import rollout


def scored_rollout(problems, tasks, backend, prompts, group_size, max_new_tokens, max_episode_tokens, reward=None):
    """The trainer's collect → score path on ``problems``: the groups' trajectories, scored, in problem order."""
    trajs = rollout(
        problems, tasks, backend, prompts, sampling(group_size, max_new_tokens, max_episode_tokens=max_episode_tokens)
    )
    score(trajs, tasks, reward or RewardConfig(), max_new_tokens)
    return trajs
