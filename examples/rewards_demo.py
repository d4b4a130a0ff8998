"""Reward functions for the worked example of docs/datasets.md (used as ``rewards_demo:brevity``).

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
