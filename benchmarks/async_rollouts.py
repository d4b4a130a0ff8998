"""Episodes per second of RL on a slow tool environment, side by side in one run: in process with
environments stepped one after another (the old reference), in process with concurrent environment steps
(``env.concurrency``), Ray synchronous with environment workers, and Ray asynchronous (bounded staleness,
streaming groups, interruptible generation).

Every environment step waits like a tool call (``polyrl.envs.latency``): ``--latency-model fixed`` waits
``--latency`` seconds; ``lognormal`` has median ``--latency`` and a 99th percentile ``--p99-over-p50``
times the median, with steps longer than ``--timeout`` cut off (the episode ends as ``tool_timeout``).
With ``--sft-steps N`` every mode starts from one SFT warm start on the task (reference episodes), so
groups have reward variance, the policy is updated at every step and the asynchronous mode's staleness is
exercised (an untrained policy never succeeds: no update happens). Episodes of env/retry last 1 to 3
turns (a wrong answer is retried), so episode lengths vary as well as tool latencies.

    python benchmarks/async_rollouts.py --steps 6 --latency-model lognormal --latency 0.1 --p99-over-p50 20 \
        --timeout 4 --env-workers 8 --task env/retry:graph_coloring --sft-steps 200
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import time

import ray
from machine import cpu_model  # benchmarks/machine.py (scripts run from benchmarks/)

from polyrl.envs.latency import LatencyModel, with_latency
from polyrl.train.config import TrainConfig
from polyrl.train.trainer import Trainer


def warm_start(args) -> tuple[str, str]:
    """SFT on the task's reference episodes (no latency: the environment is not stepped); returns the model dir
    and the prompt style it was trained with (the RL runs must show prompts the same way)."""
    data = {
        "seed": 0,
        "run_dir": tempfile.mkdtemp(prefix="async-bench-sft-"),
        "progress": False,
        "tensorboard": False,
        "threads": 1,
        "prompt": {"field": "question"},
        "tasks": [args.task],
        "rl": {"enabled": False},
        "sft": {"steps": args.sft_steps, "batch_size": 32, "lr": 0.003},
        "eval": {"problems_per_task": 32, "pass_k": 1},
    }
    trainer = Trainer(TrainConfig.model_validate(data))
    result = trainer.run()
    print(
        f"warm start: {args.sft_steps} SFT steps, held-out success {100 * result['after_sft']['mean']['accuracy']:.1f}%",
        flush=True,
    )
    return str(trainer.parts.run_dir.model_dir("sft_model")), trainer.config.prompt.style


MODES = ("local-sequential", "local", "ray-sync", "ray-async")


def latency_model(args) -> LatencyModel:
    ratio = args.p99_over_p50 if args.latency_model == "lognormal" else 1.0
    return LatencyModel(args.latency_model, args.latency, ratio, args.timeout)


def run(mode: str, args, model_path: str, style: str | None) -> dict:
    task = args.task
    data = {
        "seed": 0,
        "run_dir": tempfile.mkdtemp(prefix=f"async-bench-{mode}-"),
        "progress": False,
        "tensorboard": False,
        "threads": 1,
        "model": {"path": model_path},
        "prompt": {"field": "question", "style": style},
        "tasks": [task],
        "sft": {"enabled": False},
        "eval": {"problems_per_task": 1, "pass_k": 1},
        "rl": {
            "steps": args.steps,
            "prompts_per_step": args.prompts,
            "group_size": args.group_size,
            "max_new_tokens": 12,
        },
        "env": {"concurrency": 1 if mode == "local-sequential" else args.env_workers * args.env_threads},
        "backend": "ray" if mode.startswith("ray") else "local",
        "ray": {
            "num_rollout_workers": 2,
            "rollout_concurrency": args.concurrency,
            "num_env_workers": args.env_workers,
            "env_worker_concurrency": args.env_threads,
            "async": mode == "ray-async",
            "max_staleness": args.max_staleness,
        },
    }
    import polyrl.train.build as build

    resolve = build._resolve_tasks

    def slow(config):  # the task with its latency before anything is built from it (Ray workers included)
        tasks, specs = resolve(config)
        tasks[task] = with_latency(tasks[task], latency_model(args))
        return tasks, specs

    build._resolve_tasks = slow
    try:
        trainer = Trainer(TrainConfig.model_validate(data))
    finally:
        build._resolve_tasks = resolve
    t0 = time.perf_counter()
    trainer.rl.run(None)
    wall = time.perf_counter() - t0
    records = [json.loads(line) for line in (trainer.parts.run_dir.path / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r["stage"] == "rl"]
    episodes = args.steps * args.prompts * args.group_size
    out = {
        "mode": mode,
        "episodes": episodes,
        "wall_s": round(wall, 2),
        "episodes_per_s": round(episodes / wall, 2),
        "turns_mean": round(sum(r.get(f"turns/{task}", 0) for r in rl) / len(rl), 2),
        "tool_timeouts": round(sum(r.get(f"end/tool_timeout/{task}", 0) for r in rl) / len(rl), 3),
        "success": round(sum(r.get("accuracy", 0) for r in rl) / len(rl), 3),
        "updates": trainer.state.policy_version,
    }
    if trainer.parts.rollout_pool is not None:
        stats = trainer.parts.rollout_pool.stats
        out["in_flight_at_end"] = len(trainer.parts.rollout_pool.inflight)  # generated ahead, not counted above
        out["staleness"] = dict(sorted(collections.Counter(stats.staleness).items()))
        out["partial_rollouts"] = stats.partial_rollouts
        out["reruns"], out["stale_reruns"], out["failed_groups"] = (
            stats.reruns,
            stats.stale_reruns,
            stats.failed_groups,
        )
        trainer.parts.rollout_pool.shutdown()
    trainer.parts.run_dir.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--prompts", type=int, default=8, help="groups per RL step")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--latency", type=float, default=0.2, help="seconds per environment step (the median)")
    p.add_argument("--latency-model", choices=("fixed", "lognormal"), default="fixed")
    p.add_argument("--p99-over-p50", type=float, default=20.0, help="lognormal: the tail's weight")
    p.add_argument("--timeout", type=float, default=None, help="seconds after which a tool call is cut off")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--env-workers", type=int, default=8)
    p.add_argument(
        "--env-threads",
        type=int,
        default=1,
        help="steps each environment actor runs at once; the in-process backend gets env-workers × env-threads",
    )
    p.add_argument("--concurrency", type=int, default=8, help="groups each of the 2 rollout actors plays at once")
    p.add_argument("--max-staleness", type=int, default=1)
    p.add_argument("--task", default="env/retry:addition", help="an env/... task (its environment gets the latency)")
    p.add_argument(
        "--sft-steps", type=int, default=0, help="SFT warm start on the task first (0: the untrained policy)"
    )
    args = p.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if sorted(set(modes) - set(MODES)) or "ray-sync" not in modes:
        p.error(f"--modes: a comma-separated subset of {', '.join(MODES)} that includes ray-sync")
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; args: {vars(args)}", flush=True)
    print(f"latency: {latency_model(args).describe()}", flush=True)
    model_path, style = warm_start(args) if args.sft_steps else ("tiny", None)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    results = []
    for mode in modes:
        results.append(run(mode, args, model_path, style))
        print(f"# {mode}: {results[-1]['episodes_per_s']} episodes/s", flush=True)
    ray.shutdown()
    first = results[0]
    sync = next(r for r in results if r["mode"] == "ray-sync")["episodes_per_s"]
    for r in results:
        speedups = {
            f"speedup_vs_{first['mode'].replace('-', '_')}": round(r["episodes_per_s"] / first["episodes_per_s"], 2)
        }
        speedups["speedup_vs_ray_sync"] = round(r["episodes_per_s"] / sync, 2)  # the same key when first is ray-sync
        print(json.dumps({**r, **speedups}))


if __name__ == "__main__":
    main()
