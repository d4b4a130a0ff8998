"""Impure verifiers run in worker processes: a hang, a crash or a memory blow-up is a verdict, never a stalled run."""

import os
import socket
import time

import pytest

from polyrl.tasks import Example, Task, Verdict, get_task, isolation, verifier_worker
from polyrl.tasks.isolation import IsolatedReward, VerifierConfig, verify_many


class EvalTask(Task):
    """A deliberately unsafe verifier: it evaluates the answer as Python, as some upstream scorers do."""

    name = "test_eval"
    category = "test"

    def make(self, rng, params):
        return Example("2+2", 4, "4")

    def check(self, answer, problem):
        return float(eval(answer) == problem.answer)  # the hostile verifier under test


class NetworkTask(EvalTask):
    name = "test_network"

    def check(self, answer, problem):
        try:
            socket.create_connection(("127.0.0.1", 9), timeout=1)
        except OSError as err:
            return 0.0, "network_disabled" if "disabled" in str(err) else "network_unreachable"
        return 1.0


@pytest.fixture(autouse=True)
def fast_pool():
    isolation.configure(timeout_s=0.5, memory_mb=256, workers=2, grace_s=1.0)
    yield
    isolation.shutdown()
    isolation.configure(
        timeout_s=isolation.DEFAULT_TIMEOUT_S,
        memory_mb=isolation.DEFAULT_MEMORY_MB,
        workers=isolation.DEFAULT_WORKERS,
        grace_s=isolation.DEFAULT_GRACE_S,
    )


def _verify(task, answer):
    return task.verify(task.generate(0), f"<answer>{answer}</answer>")


def test_built_in_tasks_are_pure_and_never_start_the_pool():
    isolation.shutdown()
    task = get_task("addition")
    problem = task.generate(0)
    assert task.pure
    assert task.verify(problem, task.reference_response(problem)).correct
    assert isolation._POOL is None


def test_impure_verifier_runs_in_another_process():
    verdict = _verify(EvalTask(), "__import__('os').getpid() * 0 + 4")
    assert verdict.correct
    assert _verify(EvalTask(), f"__import__('os').getpid() == {os.getpid()}").reason == "wrong"  # 0.0 != 4


def test_python_loop_times_out_and_the_worker_keeps_serving():
    task = EvalTask()
    start = time.monotonic()
    assert _verify(task, "[0 for _ in iter(int, 1)]").reason == "verifier_timeout"
    assert time.monotonic() - start < 3
    assert _verify(task, "4").correct


def test_uninterruptible_c_computation_kills_the_worker_and_is_a_timeout():
    task = EvalTask()
    start = time.monotonic()
    assert _verify(task, "9**9**9").reason == "verifier_timeout"  # one C call: SIGALRM cannot stop it
    assert time.monotonic() - start < 6
    assert _verify(task, "4").correct  # a fresh worker took over


def test_worker_that_dies_is_a_verifier_error_and_is_replaced():
    task = EvalTask()
    assert _verify(task, "__import__('os')._exit(3)").reason == "verifier_error"
    assert _verify(task, "4").correct


def test_memory_beyond_the_limit_is_a_verifier_error():
    verdict = _verify(EvalTask(), "len(bytearray(2**30))")
    assert (verdict.score, verdict.reason) == (0.0, "verifier_error")


def test_network_is_disabled_in_workers():
    assert _verify(NetworkTask(), "1").reason == "network_disabled"


def test_batch_keeps_order_and_isolates_each_bad_call():
    task = EvalTask()
    problems = [task.generate(0)] * 5
    answers = ["4", "9**9**9", "5", "__import__('os')._exit(1)", "2*2"]
    verdicts = task.verify_many(problems, [f"<answer>{a}</answer>" for a in answers])
    assert [v.reason for v in verdicts] == ["correct", "verifier_timeout", "wrong", "verifier_error", "correct"]


def test_verify_many_mixes_pure_and_isolated_tasks_in_order():
    pure, impure = get_task("addition"), EvalTask()
    p, q = pure.generate(1), impure.generate(0)
    calls = [(pure, p, pure.reference_response(p)), (impure, q, "<answer>4</answer>"), (pure, p, "<answer>x</answer>")]
    assert [v.reason for v in verify_many(calls)] == ["correct", "correct", "malformed"]


def test_task_class_a_worker_cannot_import_is_a_verifier_error_with_a_warning():
    class Local(EvalTask):
        name = "test_local"

    with pytest.warns(UserWarning, match="cannot be sent to a verifier worker"):
        assert _verify(Local(), "4").reason == "verifier_error"


def test_results_do_not_depend_on_the_number_of_workers():
    task = EvalTask()
    problems = [task.generate(0)] * 6
    responses = [f"<answer>{a}</answer>" for a in ("4", "3+1", "5", "1/0", "x", "2**2")]
    first = task.verify_many(problems, responses)
    isolation.configure(workers=1)
    assert task.verify_many(problems, responses) == first


def test_verifier_config_rejects_bad_limits_and_applies_good_ones():
    with pytest.raises(ValueError):
        VerifierConfig(timeout_s=0)
    with pytest.raises(ValueError):
        VerifierConfig(workers=0)
    VerifierConfig(timeout_s=1.5, memory_mb=512, workers=3).apply()
    assert isolation.verifier_pool().limits.timeout_s == 1.5
    assert isolation.verifier_pool().limits.workers == 3


def test_replies_are_json_so_a_hijacked_worker_cannot_run_code_in_the_trainer(tmp_path):

    marker = tmp_path / "ran"
    read_fd, write_fd = os.pipe()
    # a protocol-0 pickle of os.system('touch …'): loading it would run the command
    evil = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    verifier_worker.write_message(write_fd, evil)
    with pytest.raises(EOFError):
        verifier_worker.read_reply(read_fd, time.monotonic() + 5)
    assert not marker.exists()
    os.close(read_fd), os.close(write_fd)


@pytest.mark.parametrize("message", [None, "ready", [2.0, True, "correct", True, None], [1, 1, 1, 1, 1], [0.5]])
def test_malformed_verdict_from_a_worker_is_a_verifier_error(message):
    assert verifier_worker.verdict_from_wire(message).reason == "verifier_error"


def length_reward(problem, response):
    """A reward callable for the opt-in test: shorter responses score higher; 'boom' raises."""
    if "boom" in response:
        raise RuntimeError("boom")
    return 1.0 / max(1, len(response))


def test_reward_callable_that_opts_in_runs_isolated():
    reward = IsolatedReward(length_reward)
    problem = EvalTask().generate(0)
    assert reward(problem, "ab") == 0.5
    assert reward.scores([problem] * 3, ["a", "abcd", "boom"]) == [1.0, 0.25, 0.0]
    assert reward.name.endswith(".length_reward")


def test_task_that_overrides_verify_keeps_it_in_verify_many():
    class Episode(EvalTask):
        def verify(self, problem, response):
            return Verdict(0.25, False, "episode")

    task = Episode()
    assert [v.reason for v in task.verify_many([task.generate(0)] * 2, ["a", "b"])] == ["episode", "episode"]


def test_every_built_in_task_is_pure_and_its_module_evaluates_no_text():
    import inspect

    from polyrl.tasks import list_tasks
    from polyrl.tasks.dataset import DatasetTask

    # built-in: defined in polyrl's task modules; a dataset task is a user's rows and verifier (impure with the
    # math verifier or a Python callable: tests/tasks/test_dataset_tasks.py), registered when a config names it
    built_in = [c for c in list_tasks() if c.__module__.startswith("polyrl.tasks.") and not issubclass(c, DatasetTask)]
    assert len(built_in) >= 41, [c.name for c in built_in]
    for cls in built_in:
        assert cls.pure, cls.name
        source = inspect.getsource(inspect.getmodule(cls))
        assert not any(word in source for word in ("eval(", "exec(", "sympy", "literal_eval")), cls.name


def test_workers_that_cannot_start_in_a_network_namespace_start_without_one():
    pool = isolation.verifier_pool()
    pool._prefix = ["false"]  # a prefix under which no worker ever starts
    with pytest.warns(UserWarning, match="network namespace"):
        assert _verify(EvalTask(), "4").correct
    assert not pool.network_namespace


def test_a_verifier_timeout_or_crash_keeps_the_format_judgment():
    # the defect: a timed-out or crashed verify lost the format term too (format_ok False for a well-formed answer)
    task = EvalTask()
    responses = ["<answer>9**9**9</answer>", "<answer>__import__('os')._exit(1)</answer>"]
    verdicts = task.verify_many([task.generate(0)] * 2, responses)
    assert [(v.reason, v.score, v.format_ok) for v in verdicts] == [
        ("verifier_timeout", 0.0, True),
        ("verifier_error", 0.0, True),
    ]
    assert verdicts[0].answer == "9**9**9"
