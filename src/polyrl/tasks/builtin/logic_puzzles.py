"""Logic puzzles about people: knights and knaves, and orderings by height."""

from __future__ import annotations

import itertools
import re
import string

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_assignment
from polyrl.tasks.task_registry import register_task

_ROLE = {True: "knight", False: "knave"}


def _statement_holds(stmt: tuple, knights: tuple[bool, ...]) -> bool:
    kind = stmt[0]
    if kind == "is":
        return knights[stmt[1]] == stmt[2]
    if kind == "both":
        return knights[stmt[1]] == stmt[3] and knights[stmt[2]] == stmt[3]
    if kind == "either":
        return knights[stmt[1]] == stmt[3] or knights[stmt[2]] == stmt[3]
    if kind == "same":
        return knights[stmt[1]] == knights[stmt[2]]
    if kind == "differ":
        return knights[stmt[1]] != knights[stmt[2]]
    return sum(knights) == stmt[1]  # "count"


def _say(stmt: tuple, names: str) -> str:
    kind = stmt[0]
    if kind == "is":
        return f"{names[stmt[1]]} is a {_ROLE[stmt[2]]}"
    if kind in ("both", "either"):
        joiner, noun = ("and", _ROLE[stmt[3]] + "s") if kind == "both" else ("or", "a " + _ROLE[stmt[3]])
        return f"{names[stmt[1]]} {joiner} {names[stmt[2]]} {'are' if kind == 'both' else 'is'} {noun}"
    if kind == "same":
        return f"{names[stmt[1]]} and {names[stmt[2]]} are alike"
    if kind == "differ":
        return f"{names[stmt[1]]} and {names[stmt[2]]} differ"
    return f"exactly {stmt[1]} of us are knights"


def _random_statement(rng, speaker: int, n: int) -> tuple:
    others = [i for i in range(n) if i != speaker]
    kind = rng.choice(
        ("is", "is", "both", "either", "same", "differ", "count") if n > 2 else ("is", "same", "differ", "count")
    )
    if kind == "is":
        return ("is", rng.choice(others), rng.random() < 0.5)
    if kind == "count":
        return ("count", rng.randint(0, n))
    a, b = (speaker, others[0]) if n == 2 else rng.sample(range(n), 2)
    return (kind, a, b, rng.random() < 0.5) if kind in ("both", "either") else (kind, a, b)


@register_task("knights_knaves")
class KnightsAndKnaves(Task):
    category = "logic"
    pure = True
    description = "Knights always tell the truth, knaves always lie: say who is which (the solution is unique)."
    params = (Param("people", 2, 5, "islanders, each making one statement"),)
    answer_shape = "NAME=knight or NAME=knave"

    def make(self, rng, p):
        n = p["people"]
        names = string.ascii_uppercase[:n]
        worlds = list(itertools.product((False, True), repeat=n))
        while True:
            planted = tuple(rng.random() < 0.5 for _ in range(n))
            statements = []
            for speaker in range(n):
                # a knight's statement is true in the planted world, a knave's false
                stmt = _random_statement(rng, speaker, n)
                while _statement_holds(stmt, planted) != planted[speaker]:
                    stmt = _random_statement(rng, speaker, n)
                statements.append(stmt)
            consistent = [w for w in worlds if all(_statement_holds(s, w) == w[i] for i, s in enumerate(statements))]
            if len(consistent) == 1:
                break
        text = " ".join(f"{names[i]}: {_say(s, names)}." for i, s in enumerate(statements))
        roles = [_ROLE[k] for k in planted]
        solution = " ".join(f"{names[i]}={r}" for i, r in enumerate(roles))
        said = "\n".join(f'{names[i]} says: "{_say(s, names)}."' for i, s in enumerate(statements))
        statement = (
            f"On an island, knights always tell the truth and knaves always lie. Each of {n} islanders, "
            f"{', '.join(names)}, is a knight or a knave, and each says one thing (two people are alike when both "
            "are knights or both are knaves, and differ otherwise):\n"
            f"{said}\nExactly one assignment fits. Who is a knight and who is a knave?\n"
            "Answer with NAME=knight or NAME=knave for every islander, separated by spaces; with islanders P and "
            "Q, for example, P=knave Q=knight."
        )
        return Example(f"knights/knaves {text}", {"people": list(names), "roles": roles}, solution, statement)

    def check(self, answer: str, problem: Problem):
        people, roles = problem.answer["people"], problem.answer["roles"]
        words = answer.lower().replace(",", " ").split()
        if words and all(w in ("knight", "knave") for w in words):
            given = words  # roles alone, in the order the people were introduced
        else:
            pairs = {k: v.lower().rstrip("s") for k, v in parse_assignment(answer, upper=True).items()}
            if set(pairs) != set(people):
                return 0.0, "wrong_people"
            given = [pairs[name] for name in people]
        if any(r not in ("knight", "knave") for r in given) or len(given) != len(people):
            return 0.0, "malformed"
        return float(given == roles)


_ORDINALS = {1: "", 2: "2nd ", 3: "3rd "}
_ORDINAL_WORDS = {1: "", 2: "second ", 3: "third ", 4: "fourth ", 5: "fifth "}


@register_task("height_ordering")
class HeightOrdering(Task):
    category = "logic"
    pure = True
    description = "From pairwise height comparisons (X>Y: X is taller), name the person at a given rank."
    params = (
        Param("people", 3, 10, "people compared"),
        Param("distractors", 0, 6, "extra comparisons implied by the others"),
        Param("rank", 1, 5, "deepest rank asked for (1 = tallest or shortest)"),
    )
    answer_shape = "the letter of that person"

    def make(self, rng, p):
        n = p["people"]
        order = rng.sample(string.ascii_uppercase[:n], n)  # tallest first
        # Adjacent comparisons fix the whole order; the distractors repeat what transitivity implies.
        pairs = [(i, i + 1) for i in range(n - 1)]
        implied = [(i, j) for i in range(n) for j in range(i + 2, n)]
        pairs += rng.sample(implied, min(p["distractors"], len(implied)))
        rng.shuffle(pairs)
        taller_first = [rng.random() < 0.5 for _ in pairs]
        facts = [f"{order[i]}>{order[j]}" if t else f"{order[j]}<{order[i]}" for (i, j), t in zip(pairs, taller_first)]
        said = [
            f"{order[i]} is taller than {order[j]}" if t else f"{order[j]} is shorter than {order[i]}"
            for (i, j), t in zip(pairs, taller_first)
        ]
        rank = rng.randint(1, min(p["rank"], n))
        tallest = rng.random() < 0.5
        person = order[rank - 1] if tallest else order[n - rank]
        ordinal = _ORDINALS.get(rank, f"{rank}th ")
        question = f"heights {', '.join(facts)}; {ordinal}{'tallest' if tallest else 'shortest'}?"
        which = f"{_ORDINAL_WORDS[rank]}{'tallest' if tallest else 'shortest'}"
        statement = (
            f"{n} people, {', '.join(sorted(order))}, all have different heights. We know: {'; '.join(said)}. "
            f"Who is the {which}?\nAnswer with the letter of that person only."
        )
        return Example(question, person, person, statement)

    def check(self, answer: str, problem: Problem):
        got = re.sub(r"[\s.!'\"]+", "", answer).upper()
        return float(got == problem.answer)
