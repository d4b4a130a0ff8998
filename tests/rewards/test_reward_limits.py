"""Reward functions held to the verifiers' standard: whatever user code does, the sample scores 0 with a reason
(counted as reward_failures/<term>) and the run goes on; and the signatures users already write are accepted."""

import textwrap
import threading
import time

import pytest

from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.rewards import REWARD_BOUND, RewardConfig, RewardScorer, score
from polyrl.rewards.callables import call_limited, checked_value
from polyrl.rollout import Trajectory
from polyrl.tasks import get_task
from polyrl.tasks.verifiers import user_callable

HOSTILE = """
import time

class BadFloat:
    def __float__(self):
        raise RuntimeError("no float for you")

def huge_int(response):
    return 10**400

def bad_float(response):
    return BadFloat()

def exits(response):
    raise SystemExit(0)

def interrupts(response):
    raise KeyboardInterrupt

def sleeps(response):
    time.sleep(1000)
    return 1.0

def sleeps_per_group(responses):
    time.sleep(1000)
    return [1.0] * len(responses)

def enormous(response):
    return -1e200

def infinite(response):
    return float("inf")

def a_string(response):
    return "0.5"

def catches_everything(response):
    try:
        time.sleep(1000)
    except Exception:
        return 1.0

def with_kwargs(problem, response, verdict=None, **kw):
    return float(verdict.correct) + 0.1 * ("target" in kw)

def only_kwargs(**kw):
    return float(sorted(kw) == ["extracted", "problem", "response", "target", "verdict"])

def trl_style(completions, prompts=None, **kwargs):
    # prompts and the question column line up with the completions; answer is the target
    rows = zip(completions, prompts, kwargs["question"], kwargs["answer"])
    return [float(str(a) in c and p.startswith(q)) for c, p, q, a in rows]

def trl_none(completions, **kwargs):
    return [None if "skip" in c else 1.0 for c in completions]

def trl_wrong_length(completions, **kwargs):
    return [1.0]
"""


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    (tmp_path / "hostile_rewards.py").write_text(textwrap.dedent(HOSTILE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "hostile_rewards"


def _trajs(*texts, group=0):
    task = get_task("addition")
    out = []
    for text in texts:
        problem = task.generate(group, "easy")
        out.append(Trajectory("addition", group, problem, [1], [2, 3], text, True, 0.0, {}, None))
    return out


def _scored(module, fn, trajs, timeout=0.3):
    config = RewardConfig(terms=[{"fn": f"{module}:{fn}", "weight": 1.0}], term_timeout=timeout)
    score(trajs, {"addition": get_task("addition")}, config, 16, RewardScorer(config, ["addition"], device=HOST))
    return trajs


@pytest.mark.parametrize(
    "fn, reason",
    [
        ("huge_int", "out_of_range"),
        ("enormous", "out_of_range"),
        ("infinite", "not_finite"),
        ("bad_float", "not_a_number: BadFloat"),
        ("a_string", "not_a_number: str"),
        ("exits", "error: SystemExit"),
        ("interrupts", "error: KeyboardInterrupt"),
        ("sleeps", "timeout"),
        ("catches_everything", "timeout"),
        ("sleeps_per_group", "timeout"),
    ],
)
def test_a_hostile_reward_function_is_a_counted_failure_not_a_crash(hostile, fn, reason, capsys):
    t0 = time.perf_counter()
    trajs = _scored(hostile, fn, _trajs("<answer>1</answer>", "<answer>2</answer>"))
    assert time.perf_counter() - t0 < 3  # a sleeping function costs its limit per call, never its sleep
    for t in trajs:
        assert t.reward_failures[fn].startswith(reason) and t.reward_terms[fn] == 0.0
        assert t.reward == t.reward_terms["verifier"]  # the term adds nothing; the verifier still counts
    assert capsys.readouterr().err.count("\n") == 1  # one warning line for the term, then only counted


def test_the_reward_bound_is_inclusive():
    assert checked_value(REWARD_BOUND) == (REWARD_BOUND, None)
    assert checked_value(-REWARD_BOUND) == (-REWARD_BOUND, None)
    assert checked_value(REWARD_BOUND * 1.000001) == (0.0, "out_of_range")
    assert checked_value(True) == (1.0, None)


def test_off_the_main_thread_a_slow_call_is_abandoned_at_its_limit():
    out = []
    worker = threading.Thread(target=lambda: out.append(call_limited(lambda: time.sleep(5), 0.2)))
    t0 = time.perf_counter()
    worker.start()
    worker.join()
    assert time.perf_counter() - t0 < 2 and out == [(None, "timeout: over 0.2s")]


def test_the_timer_is_cleared_after_a_call_in_time():
    import signal

    assert call_limited(lambda: 3, 0.5) == (3, None)
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0.0
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)


def test_kwargs_in_polyrls_signature_are_accepted_and_get_every_argument(hostile):
    trajs = _scored(hostile, "with_kwargs", _trajs("<answer>1</answer>"))
    assert trajs[0].reward_terms["with_kwargs"] == pytest.approx(float(trajs[0].verdict.correct) + 0.1)
    trajs = _scored(hostile, "only_kwargs", _trajs("<answer>1</answer>"))
    assert trajs[0].reward_terms["only_kwargs"] == 1.0


def test_trls_signature_is_called_once_per_batch_with_the_problem_columns(hostile):
    problem = get_task("addition").generate(0, "easy")
    trajs = _scored(hostile, "trl_style", _trajs(f"<answer>{problem.answer}</answer>", "<answer>nope</answer>"))
    assert [t.reward_terms["trl_style"] for t in trajs] == [1.0, 0.0]
    trajs = _scored(hostile, "trl_none", _trajs("skip me", "<answer>1</answer>"))
    assert [t.reward_terms["trl_none"] for t in trajs] == [0.0, 1.0] and not any(t.reward_failures for t in trajs)
    trajs = _scored(hostile, "trl_wrong_length", _trajs("a", "b"))
    assert all(t.reward_failures["trl_wrong_length"] == "error: returned 1 values for a batch of 2" for t in trajs)


def test_a_trl_function_asking_for_an_argument_nobody_passes_is_refused():
    def needs(completions, temperature):
        return [0.0] * len(completions)

    with pytest.raises(UserError, match="temperature would never be passed"):
        user_callable(needs, "needs")
    assert user_callable(lambda completions, **kw: [], "ok").style == "trl"


def test_a_real_ctrl_c_during_a_reward_call_still_stops_the_run():
    import os
    import signal

    def pressed():
        os.kill(os.getpid(), signal.SIGINT)  # what the terminal sends
        time.sleep(1)

    # Python installs its Ctrl-C handler only when SIGINT is not ignored at start-up, and a shell ignores it in
    # the background jobs it starts (`pytest &`): give this test the handler an interactive run has
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            call_limited(pressed, 5)
        assert call_limited(lambda: (_ for _ in ()).throw(KeyboardInterrupt), 5)[1] == "error: KeyboardInterrupt: "
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
