"""Harness rollouts: G episodes per problem, each driven by the user's agent function through the local
endpoint, turned into the same trajectories as multi-turn environment episodes (policy mask, turn spans,
the return on the last turn).

Each agent runs on a thread of its own (:mod:`.agents`), at most ``HarnessSpec.concurrency`` at once, while
this thread generates for them. Every episode ends with a reason: ``returned``, ``harness_error`` (the
function raised anything, ``SystemExit`` and ``KeyboardInterrupt`` included), ``timeout`` (still running
``timeout_s`` after it started: its requests are refused from then on and its thread abandoned),
``token_budget`` or ``context_length`` (the endpoint refused a request as too long). A returned reward is
held to the reward functions' standard (:func:`polyrl.rollout.harness.outcome.outcome`): one that is not a finite
number within ``REWARD_BOUND`` scores 0 and counts in ``reward_failures/env_return``. None of them stops
the step; each distinct failure is warned about once (episode URLs made alike), then only counted. The
processes an agent started end with its episode, and at the latest with the rollout.
"""

from __future__ import annotations

import re
import time
import warnings
from collections import deque
from dataclasses import dataclass
from typing import Any

from polyrl.policy.generation import GenerationBackend
from polyrl.policy.prompts import PromptBuilder
from polyrl.rollout.chat import ChatCodec
from polyrl.rollout.dispatch import PolicySource, Sampling, register_rollout_kind
from polyrl.rollout.harness.agents import AgentCall, abandon, start_agent
from polyrl.rollout.harness.children import end_children_of, thread_ids
from polyrl.rollout.harness.endpoint import EpisodeState, HarnessEndpoint
from polyrl.rollout.harness.http import MODEL_NAME
from polyrl.rollout.harness.ledger import Segment
from polyrl.rollout.harness.outcome import Outcome, outcome
from polyrl.rollout.harness.recorded_logprobs import response_logprobs
from polyrl.rollout.trajectory import Trajectory
from polyrl.tasks import Problem, Verdict

_EPISODE_URL = re.compile(r"https?://127\.0\.0\.1:\d+/[\w-]+/v1")


@dataclass
class AgentRun:
    name: str
    task: Any
    """The episode's :class:`~polyrl.rollout.harness.task.HarnessTask`."""
    problem: Problem
    group: int
    state: EpisodeState
    call: AgentCall | None = None
    started: float | None = None
    result: Outcome | None = None
    end_reason: str | None = None


@register_rollout_kind("harness", episodic=True)
def rollout_harness(
    problems: list[Problem],
    tasks: dict,
    backend: GenerationBackend,
    prompts: PromptBuilder,
    sampling: Sampling,
    greedy: bool = False,
    version: int = 0,
    latest: PolicySource | None = None,
) -> list[list[Trajectory]]:
    """The harness kind: ``sampling.group_size``
    agent episodes per problem (all harness tasks), one unscored group per problem, in problem order (an episode's
    return is its last turn's reward; the score stage makes the reward). The agents run on the weights ``backend``
    holds when they start (``latest`` is None: not an interruptible kind)."""
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
        AgentRun(f"ep{g}-{k}", tasks[p.task], p, g, endpoint.add_episode())
        for g, p in enumerate(problems)
        for k in range(sampling.group_size)
    ]
    concurrency = max(tasks[p.task].spec.concurrency for p in problems)
    threads_before = thread_ids()
    try:
        _drive(runs, endpoint, concurrency)
    finally:
        endpoint.close()
        end_children_of(thread_ids() - threads_before)  # what abandoned agents, or threads of agents, started
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
    rows = [(t.prompt_ids, t.response_ids) for t in trajs]
    scored = response_logprobs(model, backend.device, rows, pad, temperature)
    for t, logps in zip(trajs, scored):
        t.behaviour_logprobs = [lp if m else 0.0 for lp, m in zip(logps, t.policy_mask)]


def _drive(runs: list[AgentRun], endpoint: HarnessEndpoint, concurrency: int) -> None:
    """Start the agents, ``concurrency`` at a time, and generate for them until every episode has ended
    (returned, raised or timed out: a timed-out agent's place goes to the next at once)."""
    queued, live = deque(runs), []
    while queued or live:
        while queued and len(live) < concurrency:
            run = queued.popleft()
            run.started = time.monotonic()
            run.call = start_agent(run.task, endpoint.base_url(run.state), run.problem, run.name)
            live.append(run)
        now = time.monotonic()
        for run in list(live):
            if run.call.future.done():
                _settle(run, endpoint)
            elif now - run.started > run.task.spec.timeout_s:
                run.end_reason = "timeout"
                endpoint.end_episode(run.state, "timeout")
                abandon(run.call)
            else:
                continue
            live.remove(run)
        if live:
            endpoint.serve_once(running=len(live), timeout=0.02)


def _settle(run: AgentRun, endpoint: HarnessEndpoint) -> None:
    endpoint.end_episode(run.state)
    for name in sorted(run.state.models_named):  # agent code written for a hosted model: accepted, said once
        _warn_once(
            run,
            f"{run.problem.task}: the agent asks for model {name!r}; the run's policy answers it "
            f"(the harness endpoint serves only {MODEL_NAME!r})",
        )
    error = run.call.future.exception()
    if error is not None:
        run.end_reason = run.state.end_reason or "harness_error"
        _warn_once(run, f"{run.problem.task}: the harness ended the episode with {error!r}")
        return
    run.result = outcome(run.call.future.result())
    run.end_reason = run.state.end_reason or "returned"
    for term, reason in run.result.failures.items():
        what = "reward" if term == "env_return" else f"value {term.removeprefix('harness/')!r}"
        _warn_once(
            run,
            f"{run.problem.task}: the agent's {what} is unusable ({reason}): scored 0, counted in "
            f"reward_failures/{term}",
        )


def _warn_once(run: AgentRun, message: str) -> None:
    """Warn about ``message`` unless its task already warned of the same (episode URLs and keys made alike:
    one bug in an agent is one warning, not one per episode)."""
    text = _EPISODE_URL.sub("<episode URL>", message).replace(run.state.key, "<episode>")
    if text not in run.task.warned:
        run.task.warned.add(text)
        warnings.warn(text, stacklevel=2)


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
        out[-1].reward_failures.update(run.result.failures if run.result is not None else {})
    return out
