"""The trainer's side of Ray: start or join the cluster, run the worker actors, hand out groups.

Synchronous mode (the reference): every step submits its groups at the current policy version and waits
for them. Asynchronous mode: ``(1 + max_staleness)`` steps' worth of groups stay in flight, so workers
keep generating while the trainer updates; a group whose version is more than ``max_staleness`` behind
the trainer when it is consumed is re-run at the current version (counted in ``stale_reruns``).
A group whose actor died, or whose rollout raised (a broken environment or task), is re-run up to
``max_reruns`` times, then counted in ``failed_groups``.
"""

from __future__ import annotations

import socket
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from polyrl.errors import UserError
from polyrl.tasks import Problem


def require_ray():
    try:
        import ray
    except ImportError:
        raise UserError("backend: ray needs Ray: pip install 'polyrl[ray]'") from None
    return ray


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"ray address {address!r} is not of the form host:port")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise UserError(f"cannot reach the Ray cluster at {address!r}: {exc.strerror or exc}") from None


def connect(cfg) -> bool:
    """Join ``cfg.address`` or start a local instance; check the CPUs the workers need. Returns whether
    this call started Ray (and so should shut it down)."""
    ray = require_ray()
    started = False
    if cfg.address:
        _check_reachable(cfg.address)
    if not ray.is_initialized():
        if cfg.address:
            ray.init(address=cfg.address, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(num_cpus=cfg.num_cpus, include_dashboard=False, log_to_driver=False)
        started = True
    need = cfg.num_rollout_workers * cfg.cpus_per_rollout_worker
    have = ray.cluster_resources().get("CPU", 0)
    if need > have:
        if started:
            ray.shutdown()
        raise UserError(
            f"ray: {cfg.num_rollout_workers} rollout workers x {cfg.cpus_per_rollout_worker} CPU need "
            f"{need:g} CPUs but the cluster has {have:g}"
        )
    return started


@dataclass
class Request:
    problem: Problem
    version: int
    attempt: int = 0
    worker: int = -1
    failed_on: int = -1


@dataclass
class PoolStats:
    """Counts over the whole run: every submitted group ends completed or failed, none is lost."""

    submitted: int = 0
    completed: int = 0
    reruns: int = 0
    stale_reruns: int = 0
    failed_groups: int = 0
    task_errors: int = 0
    """Groups whose rollout raised inside a live actor (re-run like a dead actor's, then failed)."""
    last_error: str = ""
    abandoned: int = 0
    """Groups still in flight when the pool shut down (asynchronous mode generates ahead)."""
    staleness: list[int] = field(default_factory=list)


class RolloutPool:
    """Rollout (and environment) actors plus the bookkeeping of groups in flight."""

    def __init__(
        self, cfg, *, model_config, seed: int, prompt_config, reward_config, max_episode_tokens: int, tasks: dict
    ):
        self.cfg = cfg
        self.ray = require_ray()
        self.owns_ray = connect(cfg)
        from polyrl.distributed.workers import EnvWorker, RolloutWorker

        env_actor = self.ray.remote(num_cpus=0, max_restarts=cfg.max_restarts)(EnvWorker)
        self.env_workers = [env_actor.remote() for _ in range(cfg.num_env_workers)]
        actor = self.ray.remote(
            num_cpus=cfg.cpus_per_rollout_worker,
            max_restarts=cfg.max_restarts,
            max_concurrency=cfg.rollout_concurrency,
        )(RolloutWorker)
        keep = cfg.max_staleness + 2
        threads = max(1, int(cfg.cpus_per_rollout_worker))
        self.workers = [
            actor.remote(
                model_config,
                seed,
                prompt_config,
                reward_config,
                max_episode_tokens,
                tasks,
                self.env_workers,
                keep,
                threads,
            )
            for _ in range(cfg.num_rollout_workers)
        ]
        self.ray.get([w.ping.remote() for w in self.workers + self.env_workers])
        self.version = -1
        self.weights = None
        self.inflight: dict = {}  # ObjectRef -> Request
        self.stats = PoolStats()
        self._next_worker = 0
        self.sampling: dict = {}

    # -- weights --------------------------------------------------------------------------------------
    def sync_weights(self, model, version: int) -> None:
        """Broadcast ``model``'s weights as ``version``: one ``ray.put``; workers load it on first use."""
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        self.weights = self.ray.put(state)
        self.version = version

    # -- groups ---------------------------------------------------------------------------------------
    def _submit(self, req: Request) -> None:
        req.worker = self._next_worker % len(self.workers)
        self._next_worker += 1
        if req.attempt and req.worker == req.failed_on and len(self.workers) > 1:
            req.worker = (req.worker + 1) % len(self.workers)  # a re-run goes to another actor than the one that died
        ref = self.workers[req.worker].rollout.remote(req.problem, req.version, [self.weights], **self.sampling)
        self.inflight[ref] = req

    def _fill(self, target: int, make_problems: Callable[[int], list[Problem]]) -> None:
        missing = target - len(self.inflight)
        if missing > 0:
            for problem in make_problems(missing):
                self.stats.submitted += 1
                self._submit(Request(problem, self.version))

    def groups(
        self,
        n: int,
        make_problems: Callable[[int], list[Problem]],
        *,
        group_size: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
    ) -> list[list]:
        """The next ``n`` completed groups (lists of trajectories); fewer only if groups failed for good."""
        if self.weights is None:
            raise RuntimeError("sync_weights must be called before groups")
        self.sampling = {
            "group_size": group_size,
            "max_new_tokens": max_new_tokens,
            "temperature": temperature,
            "top_p": top_p,
        }
        ahead = n * (1 + self.cfg.max_staleness) if self.cfg.asynchronous else n
        self._fill(ahead, make_problems)
        out: list[list] = []
        while len(out) < n and self.inflight:
            ready, _ = self.ray.wait(list(self.inflight), num_returns=1)
            req = self.inflight.pop(ready[0])
            try:
                trajs = self.ray.get(ready[0])
            except (
                self.ray.exceptions.RayActorError,
                self.ray.exceptions.WorkerCrashedError,
                self.ray.exceptions.RayTaskError,
            ) as exc:
                if isinstance(exc, self.ray.exceptions.RayTaskError):
                    self.stats.task_errors += 1
                    self.stats.last_error = str(exc).strip().splitlines()[-1][:300]
                    warnings.warn(
                        f"rollout of a {req.problem.task} group raised (attempt {req.attempt + 1}): "
                        f"{self.stats.last_error}",
                        stacklevel=2,
                    )
                if req.attempt < self.cfg.max_reruns:
                    self.stats.reruns += 1
                    self._submit(Request(req.problem, self.version, req.attempt + 1, failed_on=req.worker))
                else:
                    self.stats.failed_groups += 1
                continue
            staleness = self.version - req.version
            if staleness > self.cfg.max_staleness:
                self.stats.stale_reruns += 1
                self._submit(Request(req.problem, self.version, req.attempt))
                continue
            self.stats.completed += 1
            self.stats.staleness += [staleness] * len(trajs)
            out.append(trajs)
        if self.cfg.asynchronous:
            self._fill(ahead, make_problems)  # keep the workers busy while the trainer updates
        return out

    def shutdown(self) -> None:
        self.stats.abandoned += len(self.inflight)
        self.inflight.clear()
        for actor in self.workers + self.env_workers:
            self.ray.kill(actor)
        if self.owns_ray:
            self.ray.shutdown()


class RaySource:
    """The collector's :class:`~polyrl.rollout.collect.GroupSource` on a :class:`RolloutPool`."""

    def __init__(self, pool: RolloutPool, sampling):
        self.pool, self.sampling = pool, sampling
        self._seen = 0  # staleness entries already reported

    def groups(self, n: int, make_problems: Callable[[int], list[Problem]]) -> list[list]:
        s = self.sampling
        return self.pool.groups(
            n,
            make_problems,
            group_size=s.group_size,
            max_new_tokens=s.max_new_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
        )

    def stats(self) -> dict[str, float]:
        st = self.pool.stats
        staleness, self._seen = st.staleness[self._seen :], len(st.staleness)
        return {
            "staleness_mean": float(sum(staleness) / len(staleness)) if staleness else 0.0,
            "staleness_max": float(max(staleness)) if staleness else 0.0,
            "failed_groups": st.failed_groups,
            "reruns": st.reruns,
            "stale_reruns": st.stale_reruns,
            "task_errors": st.task_errors,
        }
