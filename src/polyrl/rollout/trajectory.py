"""The unit that flows from rollout to loss: one completion (or one multi-turn episode), scored after collection."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from polyrl.tasks import Problem, Verdict

if TYPE_CHECKING:
    from polyrl.policy.generation import Generation


@dataclass
class Trajectory:
    """One completion or episode. Every field another module reads is typed here; ``info`` holds only the
    environment's own episode statistics (tool calls, end reason…), which only metrics read. A rollout
    returns it unscored (``reward`` 0, no ``reward_terms``; a single-turn completion without a ``verdict``):
    :func:`polyrl.rewards.stage.score` fills them in."""

    task: str
    group: int
    """Index of the problem this completion answers, within the step."""
    problem: Problem
    prompt_ids: list[int]
    response_ids: list[int]
    text: str
    finished: bool
    """The policy stopped by itself (EOS / episode end); False when the token budget cut it off."""
    reward: float
    reward_terms: dict[str, float]
    verdict: Verdict | None
    """The task's verdict (an episode's: its environment's outcome); None until a single-turn one is scored."""
    policy_version: int = 0
    """Version of the weights that sampled it (asynchronous rollouts lag behind the learner)."""
    policy_mask: list[int] | None = None
    """Which response tokens the policy produced (None: all, as in single-turn)."""
    behaviour_logprobs: list[float] | None = None
    """Log-prob of each response token under the sampling weights, when they may differ from the learner's
    (Ray workers, another inference engine); None for in-process rollouts, which share the weights."""
    turn_spans: list[tuple[int, int]] | None = None
    """Multi-turn: ``[start, end)`` of each policy turn within ``response_ids``."""
    turn_rewards: list[float] | None = None
    """Multi-turn: the environment's reward for each policy turn."""
    reward_failures: dict[str, str] = field(default_factory=dict)
    """Reward terms that could not be computed for this sample (term → reason); each counts as 0."""
    judge_position_inconsistent: bool = False
    """A position-swapped pairwise judge gave the two orders opposite verdicts (position bias)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Environment episode statistics (``turns``, ``tool_calls``, ``end_reason``…), read by the metrics."""
    turn_versions: list[int] | None = None
    """Multi-turn: version of the weights that generated each policy turn (they differ when generation was
    interrupted by a weight update: partial rollouts); ``policy_version`` is the oldest."""
    logged_terms: dict[str, float] = field(default_factory=dict)
    """Numbers the episode's own rollout reported (a harness agent's named values): logged with the reward
    terms as ``reward_terms/<name>``, never added to the reward."""
    prompt_text: str | None = None
    """What the policy read: the user message the rollout showed (the run's prompt field and style; an episode's
    or agent's first user messages), given to TRL-style reward functions as ``prompts``; None: the problem's
    ``prompt``."""

    observation_images: list[tuple[int, list]] = field(default_factory=list)
    """Multi-turn: the pictures the environment's observations showed, in turn order, as ``(turn, images)``: the
    observation after policy turn ``turn`` (1 for the first) showed ``images`` (RGB PIL images, as the
    environment gave them, before any resizing for the policy); empty for an episode without such pictures."""

    @classmethod
    def from_generation(
        cls,
        problem: Problem,
        gen: Generation,
        *,
        group: int = 0,
        version: int = 0,
        behaviour: bool = False,
        prompt_text: str | None = None,
    ) -> Trajectory:
        """The unscored single-turn trajectory of one backend completion ``gen`` answering ``problem``, sampled by
        weights ``version``; its sampling log-probs kept as :attr:`behaviour_logprobs` when ``behaviour`` (a
        backend whose weights may differ from the learner's)."""
        return cls(
            problem.task,
            group,
            problem,
            gen.prompt_ids,
            gen.completion_ids,
            gen.text,
            gen.finished,
            0.0,
            {},
            None,
            version,
            behaviour_logprobs=gen.logprobs if behaviour else None,
            prompt_text=prompt_text,
        )

    @property
    def shown_prompt(self) -> str:
        """:attr:`prompt_text`, or the problem's ``prompt`` for a trajectory made without one."""
        return self.prompt_text if self.prompt_text is not None else self.problem.prompt

    @property
    def truncated(self) -> bool:
        """The completion hit the token budget without ending (DAPO's overlong filtering masks these)."""
        return not self.finished

    @property
    def is_episode(self) -> bool:
        return self.turn_spans is not None


def number_groups(groups: list[list[Trajectory]], start: int = 0) -> list[Trajectory]:
    """The one place ``Trajectory.group`` is set: the members of ``groups[k]`` get group ``start + k``; returns
    them flat, in order."""
    out = []
    for k, members in enumerate(groups):
        for t in members:
            t.group = start + k
        out.extend(members)
    return out
