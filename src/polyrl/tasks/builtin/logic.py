"""Logic tasks over propositional formulas: evaluation, satisfiability, entailment.

Puzzles with people in them (knights and knaves, orderings) live in ``logic_puzzles`` and are registered
by the import at the bottom of this module.
"""

from __future__ import annotations

import itertools
import math
import re
import string

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_assignment, parse_bool
from polyrl.tasks.task_registry import register_task

# A formula is a nested list: ["var", name], ["not", f] or [op, f, g] with op in & | ^ ->.
# Lists, not tuples, so that formulas stored in a problem survive a JSON round trip unchanged.
_BINARY = {
    "&": lambda a, b: a and b,
    "|": lambda a, b: a or b,
    "^": lambda a, b: a != b,
    "->": lambda a, b: (not a) or b,
}


def random_formula(
    rng, names: list[str], operators: int, ops: tuple[str, ...] = ("&", "|", "^"), negation: float = 0.3
) -> list:
    if operators == 0:
        f = ["var", rng.choice(names)]
    else:
        left = rng.randint(0, operators - 1)
        op = rng.choice(ops)
        a = random_formula(rng, names, left, ops, negation)
        b = random_formula(rng, names, operators - 1 - left, ops, negation)
        for _ in range(10):  # q&q or p|p teaches nothing; a few redraws almost always avoid it
            if b != a:
                break
            b = random_formula(rng, names, operators - 1 - left, ops, negation)
        f = [op, a, b]
    return ["not", f] if rng.random() < negation else f


def evaluate(f: list, env: dict[str, bool]) -> bool:
    if f[0] == "var":
        return env[f[1]]
    if f[0] == "not":
        return not evaluate(f[1], env)
    return _BINARY[f[0]](evaluate(f[1], env), evaluate(f[2], env))


_OPERATOR_WORDS = "! is not, & is and, | is or, ^ is exclusive or, -> is implication; parentheses group."


def render(f: list, top: bool = True) -> str:
    """Infix with ! for not; every compound below the top is parenthesized, so no precedence rules apply."""
    if f[0] == "var":
        return f[1]
    if f[0] == "not":
        return "!" + render(f[1], top=False)
    text = f"{render(f[1], False)}{f[0]}{render(f[2], False)}"
    return text if top else f"({text})"


@register_task("boolean_evaluation")
class BooleanEvaluation(Task):
    category = "logic"
    pure = True
    description = "Evaluate a boolean formula (! & | ^) under a given assignment of 0/1 values."
    params = (
        Param("variables", 2, 8, "distinct variables"),
        Param("operators", 2, 20, "binary operators in the formula"),
    )
    answer_shape = "1 if the formula is true and 0 if it is false"

    def make(self, rng, p):
        names = list(string.ascii_lowercase[: p["variables"]])
        env = {n: rng.random() < 0.5 for n in names}
        f = random_formula(rng, names, p["operators"])
        value = evaluate(f, env)
        values = " ".join(f"{n}={int(env[n])}" for n in names)
        statement = (
            f"Evaluate the boolean formula {render(f)} where {', '.join(f'{n}={int(env[n])}' for n in names)} "
            f"(1 is true, 0 is false). {_OPERATOR_WORDS}\n"
            "Answer with 1 if the formula is true and 0 if it is false."
        )
        return Example(f"{values}: {render(f)}", value, str(int(value)), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_bool(answer) == problem.answer)


_LITERAL_RE = re.compile(r"([!~¬-]?)\s*([a-z][a-z0-9]{0,7})")


def _parse_sat_assignment(text: str) -> dict[str, bool]:
    """``a=1 b=0 …`` (any truth words) or a literal list ``a !b c`` naming each variable once."""
    if any(sep in text for sep in "=:"):
        return {k: parse_bool(v) for k, v in parse_assignment(text).items()}
    tokens = text.replace(",", " ").split()
    out: dict[str, bool] = {}
    for tok in tokens:
        m = _LITERAL_RE.fullmatch(tok)
        if not m or m.group(2) in out:
            raise ValueError(f"not a literal list: {tok[:20]!r}")
        out[m.group(2)] = not m.group(1)
    return out


def _variable_names(n: int) -> list[str]:
    return list(string.ascii_lowercase[:n]) if n <= 26 else [f"x{i + 1}" for i in range(n)]


@register_task("sat")
class Satisfiability(Task):
    category = "logic"
    pure = True
    description = "Find an assignment satisfying a CNF formula; any satisfying assignment is accepted."
    params = (
        Param("variables", 2, 20, "distinct variables"),
        Param("clauses", 2, 86, "clauses (86 with 20 variables is near the 3-SAT phase transition)"),
        Param("clause_size", 2, 3, "literals per clause"),
    )
    answer_shape = "name=1 for true or name=0 for false"

    def make(self, rng, p):
        n = p["variables"]
        names = _variable_names(n)
        # A planted assignment guarantees satisfiability; clauses it falsifies are redrawn.
        planted = [rng.random() < 0.5 for _ in range(n)]
        size = min(p["clause_size"], n)
        # repeated clauses are dropped while enough distinct ones exist (tiny formulas run out)
        distinct_possible = (2**size - 1) * math.comb(n, size)
        clauses: list[list[int]] = []
        seen: set[tuple[int, ...]] = set()
        while len(clauses) < p["clauses"]:
            clause = sorted((i + 1) if rng.random() < 0.5 else -(i + 1) for i in rng.sample(range(n), size))
            satisfied = any(planted[abs(lit) - 1] == (lit > 0) for lit in clause)
            if satisfied and (tuple(clause) not in seen or len(clauses) >= distinct_possible):
                clauses.append(clause)
                seen.add(tuple(clause))
        formula = "&".join(
            "(" + "|".join(("" if lit > 0 else "!") + names[abs(lit) - 1] for lit in c) + ")" for c in clauses
        )
        solution = " ".join(f"{names[i]}={int(planted[i])}" for i in range(n))
        statement = (
            f"Find truth values for the variables {', '.join(names)} that make this formula true: {formula}. "
            "! is not, | is or, & is and: every parenthesized clause needs at least one true literal.\n"
            "Answer with a value for every variable, name=1 for true or name=0 for false, separated by spaces; "
            "for example a=1 b=0 c=1."
        )
        return Example(f"sat {formula}", {"variables": n, "clauses": clauses}, solution, statement)

    def check(self, answer: str, problem: Problem):
        names = _variable_names(problem.answer["variables"])
        assignment = _parse_sat_assignment(answer)
        if set(assignment) - set(names):
            return 0.0, "unknown_variable"
        clauses = problem.answer["clauses"]
        needed = {names[abs(lit) - 1] for c in clauses for lit in c}
        if needed - set(assignment):
            return 0.0, "incomplete"
        values = [assignment.get(n) for n in names]
        return float(all(any(values[abs(lit) - 1] == (lit > 0) for lit in c) for c in clauses))


_ENTAILMENT_OPS = ("&", "|", "->")


@register_task("entailment")
class Entailment(Task):
    category = "logic"
    pure = True
    description = "Decide whether a conclusion follows from propositional premises (yes/no)."
    params = (
        Param("variables", 2, 5, "distinct propositions"),
        Param("premises", 2, 6, "premises given"),
        Param("operators", 1, 3, "largest number of connectives in one premise"),
    )
    answer_shape = "yes or no"

    def make(self, rng, p):
        names = list("pqrstu"[: p["variables"]])
        envs = [dict(zip(names, bits)) for bits in itertools.product((False, True), repeat=len(names))]
        want = rng.random() < 0.5  # balanced labels, so always answering "yes" earns half
        while True:
            premises = [
                random_formula(rng, names, rng.randint(0, p["operators"]), _ENTAILMENT_OPS, 0.25)
                for _ in range(p["premises"])
            ]
            if any(all(evaluate(f, e) for e in envs) for f in premises):
                continue  # a tautological premise (p->p) says nothing
            models = [e for e in envs if all(evaluate(f, e) for f in premises)]
            if not models:
                continue  # contradictory premises entail everything: not a fair question
            query = random_formula(rng, names, rng.randint(0, 1), _ENTAILMENT_OPS, 0.3)
            if all(evaluate(query, e) for e in envs):
                continue  # a tautology follows from anything
            if all(evaluate(query, e) for e in models) == want:
                break
        text = "; ".join(render(f) for f in premises)
        statement = (
            f"The premises are: {text}. {_OPERATOR_WORDS} Does the conclusion {render(query)} follow from the "
            "premises, that is, is it true whenever all the premises are true?\nAnswer with yes or no."
        )
        return Example(f"given {text}. does {render(query)} follow?", want, "yes" if want else "no", statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_bool(answer) == problem.answer)
