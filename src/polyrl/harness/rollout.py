"""Harness rollouts: G episodes per problem, each driven by the user's agent function through the local
endpoint, turned into the same trajectories as multi-turn environment episodes (policy mask, turn spans,
the return on the last turn).

Agents run on a thread pool (sync functions) or one event loop (coroutine functions), at most
``HarnessSpec.concurrency`` at once, while this thread generates for them. Every episode ends with a
reason: ``returned``, ``harness_error`` (the function raised or returned something else), ``timeout``
(still running after ``timeout_s``: its requests are refused from then on, a coroutine is cancelled, a
sync function's thread is left to finish on its own) or ``token_budget``. None of them stops the step.
"""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from polyrl.harness.endpoint import EpisodeState, HarnessEndpoint
from polyrl.harness.ledger import Segment
from polyrl.harness.logprobs import response_logprobs
from polyrl.harness.outcome import Outcome, outcome
from polyrl.policy.generation import GenerationBackend
from polyrl.policy.prompts import PromptBuilder
from polyrl.rollout.chat import ChatCodec
from polyrl.rollout.dispatch import Sampling
from polyrl.rollout.trajectory import Trajectory
from polyrl.tasks import Problem, Verdict


@dataclass
class AgentRun:
    name: str
    task: Any
    """The episode's :class:`~polyrl.harness.task.HarnessTask`."""
    problem: Problem
    group: int
    state: EpisodeState
    future: Future | None = None
    started: float | None = None
    result: Outcome | None = None
    end_reason: str | None = None


def rollout_harness(
    problems: list[Problem],
    tasks: dict,
    backend: GenerationBackend,
    prompts: PromptBuilder,
    sampling: Sampling,
    greedy: bool = False,
    version: int = 0,
) -> list[list[Trajectory]]:
    """``sampling.group_size`` agent episodes per problem (all harness tasks): one unscored group per problem,
    in problem order (an episode's return is its last turn's reward; the score stage makes the reward)."""
    codec = ChatCodec(prompts)
    first = tasks[problems[0].task].spec
    endpoint = HarnessEndpoint(
        codec,
        backend,
        {"temperature": sampling.temperature, "top_p": sampling.top_p, "greedy": greedy},
        sampling.max_new_tokens,
        sampling.max_episode_tokens,
        first.batch_wait_s,
    )
    runs = [
        AgentRun(name, tasks[p.task], p, g, endpoint.add_episode(name))
        for g, p in enumerate(problems)
        for name in (f"ep{g}-{k}" for k in range(sampling.group_size))
    ]
    concurrency = max(tasks[p.task].spec.concurrency for p in problems)
    slots = threading.BoundedSemaphore(concurrency)
    http = _http_pool(concurrency)
    loop = _EventLoop(concurrency) if any(r.task.is_async for r in runs) else None
    try:
        for run in runs:
            run.future = loop.submit(run, endpoint) if run.task.is_async else _start(run, endpoint, slots, http)
        _drive(runs, endpoint)
    finally:
        endpoint.close()
        http.close()
        if loop is not None:
            loop.close()
    groups: list[list[Trajectory]] = [[] for _ in problems]
    for run in runs:
        groups[run.group].extend(_trajectories(run, codec, version))
    _record_behaviour([t for g in groups for t in g], backend, codec, 1.0 if greedy else sampling.temperature)
    return groups


def _record_behaviour(trajs: list[Trajectory], backend: GenerationBackend, codec: ChatCodec, temperature: float):
    """``behaviour_logprobs`` of each trajectory's policy tokens (0 at environment tokens), under the weights
    that sampled them: the backend's own model, which no update has touched during the rollout. A backend
    without an in-process model (vLLM) leaves them None."""
    model = getattr(backend, "model", None)
    if model is None or not trajs:
        return
    pad = codec.tok.pad_token_id or 0
    scored = response_logprobs(model, [(t.prompt_ids, t.response_ids) for t in trajs], pad, temperature)
    for t, logps in zip(trajs, scored):
        t.behaviour_logprobs = [lp if m else 0.0 for lp, m in zip(logps, t.policy_mask)]


def _http_pool(concurrency: int, cls=None):
    """One connection pool for every agent's client: unbounded connections (each agent holds one while it
    waits), no timeout of its own (episodes have theirs)."""
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=concurrency)
    return (cls or httpx.Client)(limits=limits, timeout=None)


def _start(run: AgentRun, endpoint: HarnessEndpoint, slots: threading.BoundedSemaphore, http) -> Future:
    """Run a sync agent on a daemon thread of its own once one of the ``slots`` is free (a thread that never
    returns then never holds up the trainer's exit)."""
    future: Future = Future()

    def call() -> None:
        with slots:
            if not future.set_running_or_notify_cancel():
                return
            run.started = time.monotonic()
            try:
                future.set_result(run.task.agent(run.task.client(endpoint.base_url(run.name), http), run.problem))
            except BaseException as exc:
                future.set_exception(exc)

    threading.Thread(target=call, name=f"polyrl-agent-{run.name}", daemon=True).start()
    return future


class _EventLoop:
    """One event loop on its own thread for coroutine agents, at most ``concurrency`` running at once."""

    def __init__(self, concurrency: int):
        self.loop = asyncio.new_event_loop()
        self.limit = asyncio.Semaphore(concurrency)
        self.thread = threading.Thread(target=self.loop.run_forever, name="polyrl-agents", daemon=True)
        self.thread.start()
        self.http = None
        self.concurrency = concurrency

    def submit(self, run: AgentRun, endpoint: HarnessEndpoint) -> Future:
        async def call():
            async with self.limit:
                run.started = time.monotonic()
                if self.http is None:  # made on the loop that uses it
                    import httpx

                    self.http = _http_pool(self.concurrency, httpx.AsyncClient)
                return await run.task.agent(run.task.client(endpoint.base_url(run.name), self.http), run.problem)

        return asyncio.run_coroutine_threadsafe(call(), self.loop)

    def close(self) -> None:
        if self.http is not None:
            asyncio.run_coroutine_threadsafe(self.http.aclose(), self.loop).result(timeout=5)
        for task in asyncio.all_tasks(self.loop):
            self.loop.call_soon_threadsafe(task.cancel)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


def _drive(runs: list[AgentRun], endpoint: HarnessEndpoint) -> None:
    """Generate for the agents until every episode has ended (returned, raised or timed out)."""
    live = list(runs)
    while live:
        now = time.monotonic()
        for run in list(live):
            if run.future.done():
                _settle(run, endpoint)
            elif run.started is not None and now - run.started > run.task.spec.timeout_s:
                run.end_reason = "timeout"
                run.future.cancel()
                endpoint.end_episode(run.state, "timeout")
            else:
                continue
            live.remove(run)
        if live:
            endpoint.serve_once(running=sum(r.started is not None for r in live), timeout=0.02)


def _settle(run: AgentRun, endpoint: HarnessEndpoint) -> None:
    endpoint.end_episode(run.state)
    try:
        run.result = outcome(run.future.result())
        run.end_reason = run.state.end_reason or "returned"
    except Exception as exc:
        run.end_reason = run.state.end_reason or "harness_error"
        warnings.warn(f"{run.problem.task}: the harness ended the episode with {exc!r}", stacklevel=2)


def _verdict(run: AgentRun) -> tuple[float, Verdict, dict[str, float]]:
    """The episode's return, verdict and named reward terms."""
    result = run.result
    if result is None:  # raised or timed out: no reward
        return 0.0, Verdict(0.0, False, run.end_reason or "harness_error"), {}
    if result.reward is None:
        verdict = run.task.verify(run.problem, run.state.ledger.last_text)
        return verdict.score, verdict, dict(result.terms)
    correct = result.correct if result.correct is not None else result.reward > 0
    verdict = Verdict(result.reward, correct, run.end_reason or "returned")
    return result.reward, verdict, dict(result.terms)


def _trajectories(run: AgentRun, codec: ChatCodec, version: int) -> list[Trajectory]:
    """One trajectory per ledger segment that holds a completion (an episode without any gets one
    all-masked token, so that it still counts in its group)."""
    ret, verdict, terms = _verdict(run)
    ledger = run.state.ledger
    segments = [s for s in ledger.segments if s.turn_spans]
    if not segments:
        prompt = ledger.render([{"role": "user", "content": run.problem.prompt}], None)
        segments = [Segment(prompt, [codec.tok.eos_token_id], [0])]
    info = {
        "end_reason": run.end_reason,
        "requests": run.state.requests,
        "segments": len(segments),
        "history_edits": ledger.history_edits,
    }
    out = []
    for s in segments:
        turns = len(s.turn_spans)
        out.append(
            Trajectory(
                run.problem.task,
                run.group,
                run.problem,
                s.prompt_ids,
                s.response_ids,
                s.text,
                s.finished,
                0.0,
                {},
                verdict,
                version,
                s.policy_mask,
                turn_spans=list(s.turn_spans),
                turn_rewards=[0.0] * (turns - 1) + [ret] if turns else [],
                turn_versions=[version] * turns,
                logged_terms={f"harness/{k}": v for k, v in terms.items()},
                prompt_text=s.prompt_text,
                info={
                    **info,
                    "turns": turns,
                    "tool_calls": s.tool_calls,
                    "tool_errors": s.tool_errors,
                    "policy_tokens": sum(s.policy_mask),
                    "env_tokens": len(s.policy_mask) - sum(s.policy_mask),
                    "success": verdict.correct,
                    "score": verdict.score,
                },
            )
        )
    return out
