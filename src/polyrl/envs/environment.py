"""The environment protocol: ``reset() -> messages``, ``step(action_text) -> StepResult``.

An environment is created from a task :class:`~polyrl.tasks.Problem` by an :class:`EnvTask`, which is a
Task like any other (same ``generate``, difficulty space and splits), so environments go into a training
mix by name (``env/calculator:multiplication``) and everything that samples tasks works unchanged.
Observations are chat messages (``{"role": "user" | "tool", "content": ...}``, optionally with ``"images"``, pictures
a vision-language policy is shown before the text); the rollout renders them with the tokenizer's chat template and
masks their tokens out of the policy loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from polyrl.tasks.base import Problem, Task, Verdict

Message = dict[str, Any]


@dataclass
class StepResult:
    """What one environment step returns (Gymnasium's ``step`` with messages for observations)."""

    observation: list[Message]
    """Messages to append before the policy's next turn (empty when ``done``)."""
    reward: float
    """Reward for this turn; the episode return is the sum over turns."""
    done: bool
    info: dict[str, Any] = field(default_factory=dict)
    """On the last step: ``success`` (bool), ``score`` (in [0, 1]) and ``end_reason``."""


class Environment:
    """One episode. Subclasses implement ``reset`` and ``step``; tool environments also set ``tools``.

    ``step`` must never raise on any action text: a bad action becomes an observation or an end with a
    reason. ``stats`` counts what the per-environment metrics report.
    """

    tools: ClassVar[list[dict[str, Any]]] = []
    """Tools in the OpenAI function-calling format (``{"type": "function", "function": {...}}``)."""
    natural: bool = False
    """Word the messages for an instruction-tuned LM (``prompt.style: natural``) rather than in the terse shorthand
    the tiny model learns; the rollout sets it (:meth:`polyrl.rollout.chat.ChatCodec.bind`) before ``reset``."""

    def __init__(self, problem: Problem, max_turns: int):
        self.problem = problem
        self.max_turns = max_turns
        self.turn = 0
        self.stats = {"tool_calls": 0, "tool_errors": 0, "invalid_actions": 0}

    def reset(self) -> list[Message]:
        raise NotImplementedError

    def step(self, action: str) -> StepResult:
        raise NotImplementedError

    def end(self, reward: float, success: bool, score: float, reason: str, answer: str | None = None) -> StepResult:
        return StepResult(
            [], reward, True, {"success": success, "score": score, "end_reason": reason, "answer": answer}
        )

    def out_of_turns(self, reward: float = 0.0) -> StepResult | None:
        """The ending when the turn limit is reached, else None (call after counting the turn)."""
        return self.end(reward, False, 0.0, "max_turns") if self.turn >= self.max_turns else None

    def close(self) -> None:
        """Release resources (processes, databases, server sessions). Called once per episode, also after errors
        and when the rollout itself fails."""

    def close_once(self) -> None:
        """:meth:`close`, unless it ran already: how the rollout closes an episode's environment, once when the
        episode ends and once more for every unfinished one when the rollout itself fails."""
        if not getattr(self, "_closed", False):
            self._closed = True
            self.close()

    def logged_terms(self) -> dict[str, float]:
        """Named numbers of the finished episode (an OpenEnv rubric's scores), logged beside the reward terms as
        ``reward_terms/<name>`` and never added to the reward (the environment's rewards already hold them)."""
        return {}


class EnvTask(Task):
    """A task whose problems are played as multi-turn episodes.

    ``make_env(problem)`` builds the episode; ``reference_actions(problem)`` returns the assistant turns of
    a successful episode (for the SFT warm start) or None. ``verify`` scores a single response as a
    one-turn episode, so single-turn code paths (rejection sampling, leakage checks) still work.
    """

    max_turns: ClassVar[int] = 4
    is_environment: ClassVar[bool] = True
    rollout_kind: ClassVar[str] = "episode"
    """Every environment's problems are played as episodes (``polyrl.rollout.episodes``), whichever hub it comes
    from."""

    def make_env(self, problem: Problem) -> Environment:
        raise NotImplementedError

    def reference_actions(self, problem: Problem) -> list[str] | None:
        return None

    def reference_response(self, problem: Problem) -> str | None:
        actions = self.reference_actions(problem)
        return actions[0] if actions and len(actions) == 1 else None

    def verify(self, problem: Problem, response: str) -> Verdict:
        env = self.make_env(problem)
        try:
            env.reset()
            result = env.step(response)
        except Exception:
            return Verdict(0.0, False, "env_error")
        finally:
            env.close()
        if not result.done:
            return Verdict(0.0, False, "not_finished", False, None)
        info = result.info
        return Verdict(
            float(info.get("score", 0.0)),
            bool(info.get("success")),
            str(info.get("end_reason")),
            info.get("answer") is not None,
            info.get("answer"),
        )


def is_environment(task: Task) -> bool:
    return bool(getattr(task, "is_environment", False))
