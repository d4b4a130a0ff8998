"""Sequential tasks: transformations of sequences, orderings, plans."""

from __future__ import annotations

import re

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_int, parse_int_list, parse_letters
from polyrl.tasks.builtin._text import positional_credit, random_letters
from polyrl.tasks.task_registry import register_task


@register_task("reverse_letters")
class ReverseLetters(Task):
    category = "sequential"
    pure = True
    description = "Write a string of letters backwards."
    params = (Param("length", 4, 40, "letters in the string"),)
    partial_credit = True
    answer_shape = "the reversed string"

    def make(self, rng, p):
        word = random_letters(rng, p["length"])
        statement = (
            f"Write the string {word} backwards, from its last letter to its first.\n"
            "Answer with the reversed string only; hello, for example, becomes olleh."
        )
        return Example(f"reverse {word}", word[::-1], word[::-1], statement)

    def check(self, answer: str, problem: Problem):
        return positional_credit(answer.strip(), problem.answer)


@register_task("sort_digits")
class SortDigits(Task):
    category = "sequential"
    pure = True
    description = "Sort a list of integers in ascending order."
    answer_shape = "separated by spaces"
    params = (
        Param("count", 4, 30, "numbers to sort"),
        Param("digits", 1, 4, "digits per number"),
    )

    def make(self, rng, p):
        nums = [rng.randint(0, 10 ** p["digits"] - 1) for _ in range(p["count"])]
        out = sorted(nums)
        statement = (
            f"Sort these {len(nums)} numbers in ascending order: {' '.join(map(str, nums))}.\n"
            "Answer with all the numbers, smallest first, separated by spaces, repeats kept; for example 3 8 8 15."
        )
        return Example(f"sort {' '.join(map(str, nums))}", out, " ".join(map(str, out)), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int_list(answer) == problem.answer)


@register_task("reverse_words")
class ReverseWords(Task):
    category = "sequential"
    pure = True
    description = "Write the words of a sentence in reverse order."
    params = (Param("words", 3, 25, "words in the sentence"),)
    partial_credit = True
    answer_shape = "the words separated by spaces"

    def make(self, rng, p):
        words = [random_letters(rng, rng.randint(2, 6)) for _ in range(p["words"])]
        out = words[::-1]
        statement = (
            "Write the words of this sentence in reverse order, the last word first, each word spelled as it is: "
            f"{' '.join(words)}\n"
            "Answer with the words separated by spaces; one two three, for example, becomes three two one."
        )
        return Example(f"reverse words: {' '.join(words)}", out, " ".join(out), statement)

    def check(self, answer: str, problem: Problem):
        return positional_credit(answer.split(), problem.answer)  # word by word


# A count is 1-999999 without leading zeros (so no zero-length runs), or omitted for 1.
_RLE_COUNT = r"(?:[1-9]\d{0,5})?"
_RLE_COUNT_FIRST = re.compile(rf"(?:{_RLE_COUNT}[a-z])+")
_RLE_LETTER_FIRST = re.compile(rf"(?:[a-z]{_RLE_COUNT})+")


def _rle_runs(answer: str) -> list[list[tuple[int, str]]]:
    """The run lists ``answer`` can be read as: ``3a1b`` (count first) and/or ``a3b1`` (letter first); count 1 may be omitted."""
    s = re.sub(r"[\s,]+", "", answer)
    readings = []
    if _RLE_COUNT_FIRST.fullmatch(s):
        readings.append([(int(n or 1), ch) for n, ch in re.findall(r"(\d*)([a-z])", s)])
    if _RLE_LETTER_FIRST.fullmatch(s):
        readings.append([(int(n or 1), ch) for ch, n in re.findall(r"([a-z])(\d*)", s)])
    if not readings:
        raise ValueError("not a run-length encoding")
    return readings


@register_task("run_length_encoding")
class RunLengthEncoding(Task):
    category = "sequential"
    pure = True
    description = "Run-length encode a string of letters as count-letter pairs (aaab -> 3a1b)."
    answer_shape = "count-letter pairs"
    params = (
        Param("runs", 2, 16, "runs of equal letters"),
        Param("max_run", 3, 12, "longest run"),
    )

    def make(self, rng, p):
        runs: list[tuple[int, str]] = []
        for _ in range(p["runs"]):
            letter = rng.choice([c for c in "abcde" if not runs or c != runs[-1][1]])
            runs.append((rng.randint(1, p["max_run"]), letter))
        text = "".join(ch * n for n, ch in runs)
        statement = (
            f"Run-length encode the string {text}: replace each run of equal consecutive letters by the length of "
            "the run followed by the letter.\n"
            "Answer with the count-letter pairs: for each run in order, its length followed by its letter, all "
            "written together without spaces."
        )
        return Example(f"rle {text}", text, "".join(f"{n}{ch}" for n, ch in runs), statement)

    def check(self, answer: str, problem: Problem):
        target = problem.answer
        for runs in _rle_runs(answer):
            # An encoding has maximal runs: "1a2a" spells "aaa" but is not its encoding.
            if any(a[1] == b[1] for a, b in zip(runs, runs[1:])) or sum(n for n, _ in runs) != len(target):
                continue
            if "".join(ch * n for n, ch in runs) == target:
                return 1.0
        return 0.0, "wrong"


def _apply_list_op(items: list[int], op: str) -> list[int]:
    if op.startswith("rotl"):
        k = int(op[4:]) % len(items) if items else 0
        return items[k:] + items[:k]
    if op.startswith("rotr"):
        k = int(op[4:]) % len(items) if items else 0
        return items[len(items) - k :] + items[: len(items) - k]
    if op == "dedupe":  # keep the first occurrence of each value
        return list(dict.fromkeys(items))
    if op == "rev":
        return items[::-1]
    raise ValueError(op)


def _list_op_words(op: str) -> str:
    if op[:4] in ("rotl", "rotr"):
        k = int(op[4:])
        items = "item moves" if k == 1 else f"{k} items move, in order,"
        if op.startswith("rotl"):
            return f"rotate left by {k} (the first {items} to the end)"
        return f"rotate right by {k} (the last {items} to the front)"
    if op == "dedupe":
        return "remove repeated values, keeping the first occurrence of each"
    return "reverse the list"


@register_task("list_ops")
class ListOps(Task):
    category = "sequential"
    pure = True
    description = "Apply list operations (rotl k, rotr k, dedupe keeping first occurrences, rev) left to right."
    answer_shape = "integers separated by spaces"
    params = (
        Param("length", 4, 20, "list length"),
        Param("ops", 1, 3, "operations applied in sequence"),
    )

    def make(self, rng, p):
        items = [rng.randint(1, 9) for _ in range(p["length"])]
        ops = [
            rng.choice((f"rotl{rng.randint(1, 3)}", f"rotr{rng.randint(1, 3)}", "dedupe", "rev"))
            for _ in range(p["ops"])
        ]
        out = items
        for op in ops:
            out = _apply_list_op(out, op)
        steps = "; then ".join(_list_op_words(op) for op in ops)
        statement = (
            f"Start from the list {' '.join(map(str, items))} and apply, in this order: {steps}.\n"
            "Answer with the resulting list as integers separated by spaces, its first element first."
        )
        return Example(f"{','.join(ops)}: {' '.join(map(str, items))}", out, " ".join(map(str, out)), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int_list(answer, len(problem.answer) + 1) == problem.answer)


@register_task("tower_of_hanoi")
class TowerOfHanoi(Task):
    category = "sequential"
    pure = True
    description = "Move a tower of disks between pegs A, B, C; moves written from-to (AC AB CB). Longer legal solutions get partial credit."
    params = (Param("disks", 2, 8, "disks in the tower"),)
    partial_credit = True
    answer_shape = "two peg letters"

    def make(self, rng, p):
        n = p["disks"]
        source, target = rng.sample("ABC", 2)
        spare = ({"A", "B", "C"} - {source, target}).pop()
        moves = _hanoi_moves(n, source, target, spare)
        answer = {"disks": n, "source": source, "target": target}
        statement = (
            f"Tower of Hanoi: {n} disks of different sizes are stacked on peg {source}, largest at the bottom; "
            f"the pegs are A, B and C. Move the whole tower to peg {target}, one disk at a time, taking the top "
            f"disk of a peg and never putting a disk on a smaller one, in as few moves as possible: {len(moves)} "
            "moves.\nAnswer with the moves in order, separated by spaces, each written as two peg letters, the peg "
            "the disk leaves and then the peg it goes to; for example, a move of the top disk of A onto B is AB."
        )
        return Example(f"hanoi {n} disks {source}>{target}; moves like AB", answer, " ".join(moves), statement)

    def check(self, answer: str, problem: Problem):
        n, source, target = problem.answer["disks"], problem.answer["source"], problem.answer["target"]
        letters = parse_letters(answer, "ABC")
        if len(letters) % 2:
            raise ValueError("a move names two pegs")
        pegs = {peg: [] for peg in "ABC"}
        pegs[source] = list(range(n, 0, -1))
        for a, b in zip(letters[::2], letters[1::2]):
            src, dst = pegs[a], pegs[b]
            if a == b or not src or (dst and dst[-1] < src[-1]):
                return 0.0, "wrong"
            dst.append(src.pop())
        if len(pegs[target]) != n:
            return 0.0, "wrong"
        optimal, used = 2**n - 1, len(letters) // 2
        # A legal but longer solution: credit shrinks with the wasted moves, below a full solve.
        return 1.0 if used == optimal else 0.5 * optimal / used


def _hanoi_moves(n: int, source: str, target: str, spare: str) -> list[str]:
    if n == 0:
        return []
    return _hanoi_moves(n - 1, source, spare, target) + [source + target] + _hanoi_moves(n - 1, spare, target, source)


def _next_term_candidates(terms: list[int]) -> set[int]:
    """The next term under every rule family (arithmetic, geometric, quadratic, Fibonacci-like) that fits all ``terms``."""
    out = set()
    diffs = [b - a for a, b in zip(terms, terms[1:])]
    if len(set(diffs)) == 1:
        out.add(terms[-1] + diffs[0])
    if terms[0] and terms[1] % terms[0] == 0:
        ratio = terms[1] // terms[0]
        if all(b == a * ratio for a, b in zip(terms, terms[1:])):
            out.add(terms[-1] * ratio)
    second = [b - a for a, b in zip(diffs, diffs[1:])]
    if len(terms) >= 4 and len(set(second)) == 1:
        out.add(terms[-1] + diffs[-1] + second[0])
    if len(terms) >= 4 and all(terms[i] == terms[i - 1] + terms[i - 2] for i in range(2, len(terms))):
        out.add(terms[-1] + terms[-2])
    return out


@register_task("next_term")
class NextTerm(Task):
    category = "sequential"
    pure = True
    description = "The next term of an arithmetic, geometric, quadratic or Fibonacci-like integer sequence."
    answer_shape = "a single integer"
    params = (
        Param("kinds", 1, 4, "rule families drawn from: arithmetic, +geometric, +quadratic, +Fibonacci-like"),
        Param("scale", 9, 99, "largest first term and step"),
    )

    def make(self, rng, p):
        kind, m = rng.randrange(p["kinds"]), p["scale"]
        sign = rng.choice((1, -1)) if p["kinds"] > 1 else 1  # descending sequences only past the easy end
        a = rng.randint(1, m)
        if kind == 0:
            d = sign * rng.randint(1, m)
            seq = [a + d * i for i in range(5)]
        elif kind == 1:
            r = sign * rng.randint(2, 3)
            seq = [a * r**i for i in range(5)]
        elif kind == 2:
            b, c = rng.randint(-m, m), rng.randint(1, 3)
            seq = [a + b * i + c * i * i for i in range(6)]
        else:
            seq = [a, rng.randint(1, m)]
            while len(seq) < 6:
                seq.append(seq[-1] + seq[-2])
        shown = seq[:-1]
        statement = (
            f"What is the next term of the integer sequence {', '.join(map(str, shown))}? It follows one rule: a "
            "constant difference, a constant ratio, a constant second difference, or each term being the sum of "
            "the two before it.\nAnswer with a single integer, for example 42."
        )
        return Example(f"next {' '.join(map(str, shown))}", shown, str(seq[-1]), statement)

    def check(self, answer: str, problem: Problem):
        return float(parse_int(answer) in _next_term_candidates(problem.answer))
