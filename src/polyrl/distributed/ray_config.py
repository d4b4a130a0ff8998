"""The ``ray`` config section: how many workers, where the cluster is, how stale rollouts may be.

Kept free of Ray imports so that the in-process default never loads Ray.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RayConfig(BaseModel):
    """Scale-out on Ray (used when ``backend: ray``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    address: str | None = Field(
        None, description="Ray cluster address (host:port or ray://host:port); null starts a local Ray instance."
    )
    num_cpus: int | None = Field(
        None, ge=1, description="CPUs of the local Ray instance (default: all cores); ignored with an address."
    )
    num_rollout_workers: int = Field(2, ge=1, description="Rollout actors, each holding a copy of the policy.")
    cpus_per_rollout_worker: float = Field(1.0, gt=0, description="CPUs Ray reserves for each rollout actor.")
    rollout_concurrency: int = Field(
        4, ge=1, description="Groups one rollout actor plays at once (threads; hides environment latency)."
    )
    num_env_workers: int = Field(
        0,
        ge=0,
        description="Environment actors that run env/... steps (tool calls, sandboxes); 0 runs them in the rollout actors.",
    )
    env_worker_concurrency: int = Field(
        1, ge=1, description="Environment steps one environment actor runs at once (threads; for tools that wait)."
    )
    asynchronous: bool = Field(
        False,
        alias="async",
        description="YAML key `async`: keep generating while the trainer updates (bounded staleness, truncated importance sampling); false is synchronous.",
    )
    max_staleness: int = Field(
        1, ge=0, description="Oldest policy version a trained-on rollout may come from, in updates behind the trainer."
    )
    tis_cap: float = Field(
        2.0, gt=0, description="Truncated importance-sampling cap on exp(old - behaviour) per token."
    )
    interruptible: bool = Field(
        True,
        description="Asynchronous mode: a running episode generates its next turn with the newest weights "
        "(partial rollouts; behaviour log-probs per turn) instead of those it started with.",
    )
    max_restarts: int = Field(3, ge=0, description="Times Ray restarts a dead worker actor.")
    max_reruns: int = Field(
        2, ge=0, description="Times a group whose worker died is re-run before it is counted as failed."
    )
    rerun_backoff_s: float = Field(
        1.0,
        ge=0,
        description="A failed group's k-th re-run waits rerun_backoff_s * 2**(k-1) seconds first (an actor Ray is "
        "restarting answers 'unavailable' until it is back; immediate re-runs would all meet it).",
    )
