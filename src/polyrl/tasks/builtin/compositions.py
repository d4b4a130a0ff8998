"""Compositional string tasks: primitive transformations f and their chains h(x) = g(f(x)).

Each primitive is a task (``compose/rev``, ``compose/sort``, …). Any chain of primitives is a task too,
named by the ops in the order they apply: ``compose/rev+shift`` reverses the string, then shifts every
letter. Chains are built on demand (``get_task("compose/rot+sort+up")``); ``compose/mix`` draws a random
training chain whose length is the difficulty parameter ``depth``.

A fixed share of the chains of every depth is *held out*: ``compose/mix`` never draws them, so they measure
whether a policy composes skills it learned separately (the string-transformation setting of Yuan et al.,
"From f(x) and g(x) to f(g(x)): LLMs Learn New Skills in RL by Composing Old Ones", 2025). Which chains are
held out depends only on the chain's name (a hash), so the split never moves when primitives are added.
"""

from __future__ import annotations

import hashlib
import itertools
import string
from collections.abc import Callable

from polyrl.errors import UserError
from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._text import positional_credit, random_letters
from polyrl.tasks.prefixes import TaskRequest, register_task_prefix, with_answer_format
from polyrl.tasks.task_registry import register_task

PREFIX = "compose/"
SEPARATOR = "+"
MAX_DEPTH = 4
HELD_OUT_FRACTION = 0.25
"""Share of the chains of each depth (≥ 2) that ``compose/mix`` never draws."""


def _shift(s: str) -> str:
    table = str.maketrans(
        string.ascii_lowercase + string.ascii_uppercase,
        string.ascii_lowercase[1:] + "a" + string.ascii_uppercase[1:] + "A",
    )
    return s.translate(table)


def _swap_pairs(s: str) -> str:
    chars = list(s)
    for i in range(0, len(chars) - 1, 2):
        chars[i], chars[i + 1] = chars[i + 1], chars[i]
    return "".join(chars)


PRIMITIVES: dict[str, tuple[Callable[[str], str], str]] = {
    "rev": (lambda s: s[::-1], "write the string backwards"),
    "sort": (lambda s: "".join(sorted(s)), "sort the letters alphabetically (uppercase before lowercase)"),
    "shift": (_shift, "replace every letter by the next one in the alphabet (z becomes a)"),
    "rot": (lambda s: s[1:] + s[:1], "move the first letter to the end"),
    "swap": (_swap_pairs, "swap the 1st and 2nd letters, the 3rd and 4th, and so on"),
    "up": (str.upper, "write every letter in uppercase"),
}
"""Length-preserving string functions, by op name: (function, what it does in words)."""


def parse_chain(name: str) -> tuple[str, ...]:
    """The ops of ``compose/<op>+<op>…`` in the order they apply; a bad name is a UserError."""
    body = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    ops = tuple(body.split(SEPARATOR))
    unknown = [op for op in ops if op not in PRIMITIVES]
    if unknown:
        raise UserError(
            f"unknown string op(s) {', '.join(map(repr, unknown))} in {name!r}; known: {', '.join(PRIMITIVES)}"
        )
    if len(ops) > MAX_DEPTH:
        raise UserError(f"{name!r} chains {len(ops)} ops; at most {MAX_DEPTH}")
    return ops


def chain_name(ops: tuple[str, ...]) -> str:
    return PREFIX + SEPARATOR.join(ops)


def apply_chain(ops: tuple[str, ...], text: str) -> str:
    """h(x) = op_k(…op_2(op_1(x)))."""
    for op in ops:
        text = PRIMITIVES[op][0](text)
    return text


def all_chains(depth: int) -> list[tuple[str, ...]]:
    """Every chain of ``depth`` ops without the same op twice in a row (rev+rev, up+up are trivial)."""
    return [c for c in itertools.product(PRIMITIVES, repeat=depth) if all(a != b for a, b in zip(c, c[1:]))]


def is_held_out(ops: tuple[str, ...]) -> bool:
    """Whether the chain belongs to the held-out compositions: SHA-256 of its name, read as a number in [0, 1),
    below :data:`HELD_OUT_FRACTION`. Primitives (depth 1) are never held out."""
    if len(ops) < 2:
        return False
    digest = hashlib.sha256(chain_name(ops).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < HELD_OUT_FRACTION


def held_out_chains(depth: int) -> list[tuple[str, ...]]:
    return [c for c in all_chains(depth) if is_held_out(c)]


def training_chains(depth: int) -> list[tuple[str, ...]]:
    return [c for c in all_chains(depth) if not is_held_out(c)]


SHAPE = (
    Param("length", 4, 12, "letters in the input string"),
    Param("alphabet", 6, 26, "distinct letters the input is drawn from (the first of a-z)"),
)


def _example(ops: tuple[str, ...], rng, p: dict) -> Example:
    length = p["length"]
    word = random_letters(rng, length, string.ascii_lowercase[: p["alphabet"]])
    out = apply_chain(ops, word)
    steps = "; then ".join(PRIMITIVES[op][1] for op in ops)
    statement = (
        f"Transform the string {word}: {steps}.\nAnswer with the transformed string only, {length} letters long."
    )
    return Example(f"{' '.join(ops)}: {word}", out, out, statement)


class ChainTask(Task):
    """A fixed chain of primitive ops applied to a random string; subclasses set ``ops``."""

    category = "compose"
    pure = True
    partial_credit = True
    answer_shape = "the transformed string"
    params = SHAPE
    ops: tuple[str, ...] = ()

    def make(self, rng, p):
        return _example(self.ops, rng, p)

    def check(self, answer: str, problem: Problem):
        return positional_credit(answer.strip(), problem.answer)


_CHAINS: dict[tuple[str, ...], type[ChainTask]] = {}


def chain_task_class(ops: tuple[str, ...]) -> type[ChainTask]:
    """The task class of one chain (the same class for the same chain)."""
    if ops not in _CHAINS:
        doc = "; then ".join(PRIMITIVES[op][1] for op in ops)
        attrs = {"name": chain_name(ops), "ops": ops, "description": f"{doc[0].upper()}{doc[1:]}."}
        _CHAINS[ops] = type(f"Chain_{'_'.join(ops)}", (ChainTask,), attrs)
    return _CHAINS[ops]


for _op in PRIMITIVES:
    register_task(chain_name((_op,)))(chain_task_class((_op,)))


@register_task_prefix(PREFIX)
def _chain_by_name(request: TaskRequest) -> ChainTask:
    """Any chain by its name (``compose/rot+sort+up``), built on first use."""
    return with_answer_format(chain_task_class(parse_chain(request.name))(), request)


@register_task("compose/mix")
class ComposeMix(Task):
    category = "compose"
    pure = True
    partial_credit = True
    description = "A random training chain of `depth` string ops (never a held-out chain) on a random string."
    answer_shape = "the transformed string"
    params = (Param("depth", 1, 3, "ops in the chain"), *SHAPE)

    def make(self, rng, p):
        chains = training_chains(p["depth"]) if p["depth"] > 1 else all_chains(1)
        return _example(rng.choice(chains), rng, p)

    def check(self, answer: str, problem: Problem):
        return positional_credit(answer.strip(), problem.answer)
