"""The arithmetic self-play game: the policy proposes integer expressions and solves them.

``propose_expression`` is the proposer's task: its prompt asks for an expression over ``+ - *`` with a given number
of operands from a given range, one of them a given number (seed-driven hints, so a step's prompts ask for
different problems), followed by ``=`` and its value. Its verifier parses the proposal with a whitelist (digits,
``+ - *``, parentheses, spaces), bounded in length, nesting and number size, evaluates it exactly and checks the
constraints and the claimed value. A valid proposal becomes an ``expression_evaluation`` problem (the solver's
task) with ``source="proposed"``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import evaluate_expression, parse_int
from polyrl.tasks.builtin.arithmetic import expression_example, join_operands
from polyrl.tasks.proposer import ProposerTask
from polyrl.tasks.task_registry import register_task

MAX_PROPOSAL_CHARS = 120
"""Longest proposal (expression, ``=`` and value) the verifier reads; longer ones are invalid (``too_long``)."""
MAX_NESTING = 8
"""Deepest parenthesis nesting a proposal may use."""
_ALLOWED = frozenset("0123456789+-*() ")

INVALID_REASONS = (
    "too_long",
    "no_claim",
    "unparseable",
    "wrong_operands",
    "out_of_range",
    "missing_number",
    "wrong_claim",
)
"""Why a proposal is invalid (the verdict's reason; ``no_answer``/``malformed`` come from answer extraction)."""


class InvalidProposal(ValueError):
    """A proposal the verifier rejects; ``reason`` is one of :data:`INVALID_REASONS`."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Proposal:
    expression: str
    """The expression without spaces (what the solver is shown, and what makes two proposals the same)."""
    numbers: tuple[int, ...]
    value: int


def parse_proposal(text: str, operands: int, max_number: int, required: int) -> Proposal:
    """Parse and check ``<expression>=<value>``: exactly ``operands`` numbers, each at most ``max_number``, one of
    them ``required``, and the claimed value the expression's exact value. Linear in the (bounded) length; never
    evaluates the text as code. Raises :class:`InvalidProposal`."""
    if len(text) > MAX_PROPOSAL_CHARS:
        raise InvalidProposal("too_long")
    expression, equals, claim = text.partition("=")
    if not equals or not claim.strip():
        raise InvalidProposal("no_claim")
    if "=" in claim or not set(expression) <= _ALLOWED:
        raise InvalidProposal("unparseable")
    try:
        value, numbers = evaluate_expression(expression, MAX_PROPOSAL_CHARS, MAX_NESTING)
        claimed = parse_int(claim)
    except (ValueError, ZeroDivisionError):
        raise InvalidProposal("unparseable") from None
    if len(numbers) != operands:
        raise InvalidProposal("wrong_operands")
    if max(numbers) > max_number:
        raise InvalidProposal("out_of_range")
    if required not in numbers:
        raise InvalidProposal("missing_number")
    if claimed != value:
        raise InvalidProposal("wrong_claim")
    return Proposal("".join(expression.split()), tuple(numbers), int(value))


def _expression_over(rng, numbers: list[int]) -> tuple[str, int]:
    """A random tree over ``numbers`` (in order) with + - *, written with only the parentheses it needs."""
    if len(numbers) == 1:
        return str(numbers[0]), 3
    cut = rng.randint(1, len(numbers) - 1)
    op = rng.choice("+-*")
    left, left_level = _expression_over(rng, numbers[:cut])
    right, right_level = _expression_over(rng, numbers[cut:])
    return join_operands(left, left_level, op, right, right_level)


@register_task("propose_expression")
class ProposeExpression(ProposerTask):
    category = "arithmetic"
    pure = True
    solver_task = "expression_evaluation"
    description = (
        "Self-play proposer: write an integer expression over + - * with the asked-for operands, and its value."
    )
    answer_shape = "the expression, then =, then its value"
    params = (
        Param("operands", 3, 6, "most operands a prompt asks for (each asks for 2 to this many)"),
        Param("digits", 1, 3, "digits of the largest number a proposal may use"),
    )

    def make(self, rng, p):
        n = rng.randint(2, p["operands"])
        top = 10 ** p["digits"] - 1
        required = rng.randint(0, top)
        numbers = [rng.randint(0, top) for _ in range(n)]
        numbers[rng.randrange(n)] = required
        expression, _ = _expression_over(rng, numbers)
        value = int(evaluate_expression(expression, MAX_PROPOSAL_CHARS, MAX_NESTING)[0])
        statement = (
            f"Write a practice problem for a student: an arithmetic expression that uses exactly {n} whole numbers "
            f"from 0 to {top}, one of which is {required}, combined with +, - and * (parentheses allowed, no other "
            "symbols). A good problem is one the student gets right about half of the time.\n"
            f"Answer with {self.answer_shape}, in one piece: the = and the value are part of the answer."
        )
        answer = {"operands": n, "max_number": top, "required": required}
        return Example(f"propose {n} numbers 0-{top} with {required}:", answer, f"{expression}={value}", statement)

    def check(self, answer: str, problem: Problem):
        a = problem.answer
        try:
            parse_proposal(answer, a["operands"], a["max_number"], a["required"])
        except InvalidProposal as exc:
            return 0.0, exc.reason
        return 1.0, "correct"

    def proposed_problem(self, answer: str, proposal: Problem, solver: Task) -> Problem:
        a = proposal.answer
        p = parse_proposal(answer, a["operands"], a["max_number"], a["required"])
        seed = int.from_bytes(hashlib.sha256(p.expression.encode()).digest()[:8], "big") % 2**63
        params = {"operators": len(p.numbers) - 1, "digits": max(len(str(x)) for x in p.numbers)}
        return solver.problem_from(expression_example(p.expression, p.value), seed, "train", None, params, "proposed")

    def proposal_stats(self, problem: Problem) -> dict[str, float]:
        return {
            "operands": float(problem.params["operators"] + 1),
            "answer_digits": float(len(str(abs(int(problem.answer))))),
        }
