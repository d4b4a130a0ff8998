"""Reward functions for the worked examples of docs/datasets.md (``rewards_demo:brevity``) and docs/rewards.md.

polyrl calls a reward function with the arguments it names: per completion any of ``problem``, ``response``,
``extracted``, ``target``, ``verdict``; per group ``problems``, ``responses``, ``verdicts`` (one value each).
"""


def brevity(response: str, extracted: str | None) -> float:
    """Minus the characters written around the answer, per 100: 0 for a bare ``<answer>…</answer>``."""
    around = len(response) - len(extracted or "") - len("<answer></answer>")
    return -max(around, 0) / 100


def distinct_answers(verdicts: list) -> list[float]:
    """Per group: 1 for a completion whose extracted answer no other completion of its group gave."""
    answers = [v.answer for v in verdicts]
    return [float(a is not None and answers.count(a) == 1) for a in answers]


def brevity_trl(completions: list[str], prompts: list[str] | None = None, **kwargs) -> list[float]:
    """``brevity`` written the way TRL's reward functions are: one call per batch, the problems' columns
    (``question``, ``answer``, ``solution``, ``task``) as keyword lists, one float per completion back."""
    return [
        -max(len(c) - len(str(a)) - len("<answer></answer>"), 0) / 100 for c, a in zip(completions, kwargs["answer"])
    ]


def sleepy(response: str, **kwargs) -> float:
    """A reward function that never returns in time: its calls score 0, counted as ``reward_failures/sleepy``."""
    import time

    time.sleep(60)
    return 1.0
