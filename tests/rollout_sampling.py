"""Sampling settings for tests: the config's defaults (``rl`` and ``env`` sections) with the group size and token
budget a test needs (importable as ``rollout_sampling``: ``tests/`` is on the path)."""

import dataclasses

from polyrl.envs.env_registry import EnvConfig
from polyrl.rollout import Sampling
from polyrl.train.config import RLConfig


def sampling(group_size: int, max_new_tokens: int, **changes) -> Sampling:
    """:class:`Sampling` of the default config, with ``group_size``, ``max_new_tokens`` and ``changes``."""
    default = Sampling.of(RLConfig(), EnvConfig())
    return dataclasses.replace(default, group_size=group_size, max_new_tokens=max_new_tokens, **changes)
