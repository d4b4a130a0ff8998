"""``env/retry:<task>``: answer, get a short feedback message when wrong, try again (up to k attempts).

A success at attempt ``k`` earns ``discount ** (k - 1)``, so a policy is paid more for being right the
first time but still learns from feedback. The reward arrives on the turn of the success (per-turn
rewards, which turn-level advantages can credit to that turn).
"""

from __future__ import annotations

from polyrl.envs.env_registry import EnvConfig, register_env
from polyrl.envs.environment import Environment, Message, StepResult
from polyrl.envs.wrapped import WrappedTask
from polyrl.tasks import Problem, Task, Verdict, get_task

RETRY_PREFIX = "env/retry:"
"""Task names ``env/retry:<task>``."""


def retried_task_name(name: str) -> str | None:
    """``<task>`` of a task name ``env/retry:<task>``; None for any other name."""
    return name[len(RETRY_PREFIX) :] if name.startswith(RETRY_PREFIX) else None


def feedback(task: Task, verdict: Verdict) -> str:
    """The message after a wrong attempt (the training environment's and the multi-attempt evaluation's)."""
    if verdict.answer is None:
        return f"No answer found ({verdict.reason}). {task.answer_format.instruction()}"
    return f"{verdict.answer} is wrong. Try again."


class RetryEnvironment(Environment):
    def __init__(self, problem: Problem, task: Task, attempts: int, discount: float):
        super().__init__(problem, attempts)
        self.task = task
        self.discount = discount

    def reset(self) -> list[Message]:
        return [{"role": "user", "content": self.problem.prompt}]

    def step(self, action: str) -> StepResult:
        self.turn += 1
        verdict = self.task.verify(self.problem, action)
        if verdict.correct:
            reward = self.discount ** (self.turn - 1)
            return self.end(reward, True, reward, "correct", verdict.answer)
        if self.turn >= self.max_turns:
            return self.end(
                0.0, False, verdict.score * self.discount ** (self.turn - 1), "attempts_exhausted", verdict.answer
            )
        if verdict.answer is None:
            self.stats["invalid_actions"] += 1
        return StepResult([{"role": "user", "content": feedback(self.task, verdict)}], 0.0, False)


class RetryTask(WrappedTask):
    def __init__(self, inner: Task, config: EnvConfig):
        super().__init__(inner, config.max_turns or config.attempts)
        self.discount = config.retry_discount

    def make_env(self, problem: Problem) -> Environment:
        return RetryEnvironment(problem, self.inner, self.max_turns, self.discount)

    def reference_actions(self, problem: Problem) -> list[str] | None:
        response = self.inner.reference_response(problem)
        return None if response is None else [response]


@register_env("retry", needs_argument=True)
def retry_env(argument: str, config: EnvConfig) -> RetryTask:
    return RetryTask(get_task(argument), config)
