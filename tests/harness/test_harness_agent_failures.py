"""Whatever a user's agent does — raise SystemExit or KeyboardInterrupt, block its event loop, spin, return a
reward of 1e200, start processes, post to another episode's URL — ends as a counted outcome of its own
episode: the rollout returns in bounded time with every episode's trajectories, and nothing of the agent
outlives its episode."""

import _thread
import math
import os
import signal
import subprocess
import threading
import time
import warnings
from pathlib import Path

import pytest
from harness_rollouts import scored_rollout

from polyrl.device import HOST
from polyrl.rollout.harness.task import HarnessSpec, HarnessTask
from polyrl.tasks import get_task


def _play(agent, backend, prompts, group_size=2, **spec):
    task = HarnessTask(get_task("addition"), HarnessSpec(fn="tests:agent", **spec), agent=agent)
    return scored_rollout([task.generate(1, "easy")], {"addition": task}, backend, prompts, group_size, 16, 384)


def _ask(base_url, problem, url=None):
    import httpx

    body = {"messages": [{"role": "user", "content": problem.prompt}]}
    return httpx.post(f"{url or base_url}/chat/completions", json=body, timeout=30)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("raised", [SystemExit(0), KeyboardInterrupt()], ids=["SystemExit", "KeyboardInterrupt"])
def test_a_sync_agent_raising_system_exit_or_keyboard_interrupt_is_a_counted_failure(scripted, prompts, raised):
    def agent(base_url, problem):
        _ask(base_url, problem)
        raise raised

    with pytest.warns(UserWarning, match=type(raised).__name__):
        trajs = _play(agent, scripted(lambda text: "x"), prompts)
    assert [t.info["end_reason"] for t in trajs] == ["harness_error", "harness_error"]
    assert all(t.reward == 0.0 and sum(t.policy_mask) > 0 for t in trajs)


def test_an_async_agent_raising_system_exit_is_a_counted_failure(scripted, prompts):
    async def agent(base_url, problem):
        raise SystemExit(3)

    start = time.monotonic()
    with pytest.warns(UserWarning, match="SystemExit"):
        trajs = _play(agent, scripted(lambda text: "x"), prompts, group_size=3, timeout_s=2)
    assert [t.info["end_reason"] for t in trajs] == ["harness_error"] * 3 and time.monotonic() - start < 2


def test_an_async_agent_that_blocks_its_event_loop_times_out_alone(scripted, prompts):
    calls = []

    async def agent(base_url, problem):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(20)  # blocks its event loop: the other episodes' loops go on
        return 1.0 if _ask(base_url, problem).status_code == 200 else 0.0

    start = time.monotonic()
    trajs = _play(agent, scripted(lambda text: "x"), prompts, group_size=3, timeout_s=1)
    assert sorted(t.info["end_reason"] for t in trajs) == ["returned", "returned", "timeout"]
    assert sorted(t.reward for t in trajs) == [0.0, 1.0, 1.0] and time.monotonic() - start < 5


def test_a_busy_agent_is_stopped_at_its_timeout(scripted, prompts):
    threads = []

    def agent(base_url, problem):
        threads.append(threading.current_thread())
        while True:
            pass

    (t,) = _play(agent, scripted(lambda text: "x"), prompts, group_size=1, timeout_s=0.5)
    assert t.info["end_reason"] == "timeout"
    threads[0].join(timeout=2)
    assert not threads[0].is_alive()


def test_a_ctrl_c_of_the_trainer_still_stops_the_rollout(scripted, prompts):
    def agent(base_url, problem):
        time.sleep(20)

    # Python's own SIGINT handler, as in `polyrl train`'s main thread, whatever an earlier test in this process
    # installed; the timer is cancelled after, so that a late interrupt cannot reach another test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)  # what SIGINT does to the trainer's main thread
    try:
        timer.start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            _play(agent, scripted(lambda text: "x"), prompts, group_size=1, timeout_s=30)
        assert time.monotonic() - start < 5
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (1e200, "out_of_range"),
        (-1e200, "out_of_range"),
        (math.nan, "not_finite"),
        (math.inf, "not_finite"),
        ({"reward": math.nan}, "not_finite"),
        ("1.0", "not_a_number: str"),
        ([1.0], "not_a_number: list"),
    ],
)
def test_a_reward_that_is_not_a_bounded_number_scores_zero_and_is_counted(scripted, prompts, value, reason):
    def agent(base_url, problem):
        _ask(base_url, problem)
        return value

    with pytest.warns(UserWarning, match="reward_failures/env_return"):
        trajs = _play(agent, scripted(lambda text: "x"), prompts)
    assert all(t.reward == 0.0 and t.reward_failures == {"env_return": reason} for t in trajs)
    assert all(t.info["end_reason"] == "returned" and not t.verdict.correct for t in trajs)


def test_a_named_value_beyond_the_bound_is_dropped_and_counted(scripted, prompts):
    def agent(base_url, problem):
        _ask(base_url, problem)
        return {"reward": 0.5, "steps": 3, "huge": 1e300, "note": "text is not a term"}

    with pytest.warns(UserWarning, match="reward_failures/harness/huge"):
        (t,) = _play(agent, scripted(lambda text: "x"), prompts, group_size=1)
    assert t.reward == 0.5 and t.reward_failures == {"harness/huge": "out_of_range"}
    assert {k: v for k, v in t.reward_terms.items() if k.startswith("harness/")} == {"harness/steps": 3.0}


def test_an_agent_cannot_post_to_a_sibling_episode(scripted, prompts):
    urls, statuses = [], []

    def agent(base_url, problem):
        urls.append(base_url)
        guessed = base_url.rsplit("/", 2)[0] + "/ep0-1/v1"  # the sibling's URL before episode keys were random
        statuses.append(_ask(base_url, problem, url=guessed).status_code)
        return 0.0

    trajs = _play(agent, scripted(lambda text: "x"), prompts)
    assert statuses == [404, 404] and all(t.info["requests"] == 0 for t in trajs)
    keys = [u.rsplit("/", 2)[1] for u in urls]
    assert len(set(keys)) == 2 and all(len(k) >= 21 for k in keys)


def test_processes_an_agent_starts_end_with_its_episode(scripted, prompts):
    pids = []

    def agent(base_url, problem):
        pids.append(subprocess.Popen(["sleep", "60"]).pid)
        child = os.fork()
        if child == 0:  # the forked copy of this process sleeps, then leaves without running anything else
            try:
                time.sleep(60)
            finally:
                os._exit(0)
        pids.append(child)
        return 1.0

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() in a threaded process
        trajs = _play(agent, scripted(lambda text: "x"), prompts)
    assert [t.info["end_reason"] for t in trajs] == ["returned", "returned"] and len(pids) == 4
    assert not [pid for pid in pids if _alive(pid)]


def test_processes_of_an_agent_that_times_out_end_at_its_timeout(scripted, prompts):
    pids = []

    def agent(base_url, problem):
        pids.append(subprocess.Popen(["sleep", "60"], start_new_session=True).pid)
        time.sleep(20)

    (t,) = _play(agent, scripted(lambda text: "x"), prompts, group_size=1, timeout_s=0.5)
    assert t.info["end_reason"] == "timeout" and len(pids) == 1 and not _alive(pids[0])


def test_one_failure_is_warned_about_once_whatever_episode_url_it_names(scripted, prompts):
    def agent(base_url, problem):
        raise RuntimeError(f"could not reach {base_url}/chat/completions")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trajs = _play(agent, scripted(lambda text: "x"), prompts, group_size=6)
    assert len(trajs) == 6
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert messages == [
        "addition: the harness ended the episode with RuntimeError('could not reach <episode URL>/chat/completions')"
    ]


def test_a_history_beyond_the_models_positions_is_refused_and_not_trained_on(prompts):
    from polyrl.policy import TransformersBackend
    from polyrl.policy.loading import ModelConfig, load_policy

    tiny = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_positions": 64}
    policy = load_policy(ModelConfig(path="tiny", tiny=tiny), device=HOST)
    answers = []

    def agent(base_url, problem):
        import httpx

        history = [{"role": "user", "content": f"{problem.prompt} " * 20}]  # ~300 tokens
        reply = httpx.post(f"{base_url}/chat/completions", json={"messages": history}, timeout=30)
        answers.append((reply.status_code, reply.json()["error"]["code"]))
        return 0.0

    (t,) = _play(agent, TransformersBackend(policy.model, prompts.tokenizer, device=HOST), prompts, group_size=1)
    assert answers == [(400, "context_length_exceeded")]
    assert t.info["end_reason"] == "context_length" and t.info["requests"] == 0 and sum(t.policy_mask) == 0


def _named(model):
    def agent(base_url, problem):
        import httpx

        body = {"messages": [{"role": "user", "content": problem.prompt}]} | ({"model": model} if model else {})
        reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=30).json()
        return 1.0 if reply["choices"][0]["message"]["content"] == "x" else 0.0

    return agent


def test_an_agent_naming_another_model_is_answered_by_the_policy_and_said_once(scripted, prompts):
    """Issue #43: ``gpt-does-not-exist-9000`` was served without a word. It is still served (agent code written
    for a hosted model trains as it is), and the log says so once."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trajs = _play(_named("gpt-does-not-exist-9000"), scripted(lambda text: "x"), prompts, group_size=4)
    assert [t.info["end_reason"] for t in trajs] == ["returned"] * 4 and all(t.reward == 1.0 for t in trajs)
    assert [str(w.message) for w in caught if issubclass(w.category, UserWarning)] == [
        "addition: the agent asks for model 'gpt-does-not-exist-9000'; the run's policy answers it "
        "(the harness endpoint serves only 'polyrl-policy')"
    ]


@pytest.mark.parametrize("model", ["polyrl-policy", None])
def test_an_agent_naming_the_endpoints_model_or_none_is_not_warned_about(scripted, prompts, model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trajs = _play(_named(model), scripted(lambda text: "x"), prompts, group_size=2)
    assert all(t.reward == 1.0 for t in trajs)
    assert not [w for w in caught if issubclass(w.category, UserWarning)]
