"""Crypto tasks: classical ciphers to decode, letter codes, and cryptarithms.

Plaintexts are random lowercase words rather than English, so a decoding is checked letter by letter
and no dictionary can substitute for applying the cipher.
"""

from __future__ import annotations

import re
import string

from polyrl.tasks.base import Example, Param, Problem, Task
from polyrl.tasks.builtin._parse import parse_assignment, parse_int
from polyrl.tasks.builtin._text import positional_credit, random_letters, random_words
from polyrl.tasks.task_registry import register_task

_ALPHABET = string.ascii_lowercase
_DECODED_TEXT = "Answer with the decoded text in lowercase, spaces where the ciphertext has them, for example: abc de."


def shift_letters(text: str, shifts: list[int]) -> str:
    """Shift the i-th letter by ``shifts[i % len(shifts)]``; spaces pass through and do not use a shift."""
    out, i = [], 0
    for c in text:
        if c in _ALPHABET:
            out.append(_ALPHABET[(_ALPHABET.index(c) + shifts[i % len(shifts)]) % 26])
            i += 1
        else:
            out.append(c)
    return "".join(out)


def score_plaintext(answer: str, target: str):
    """The text letter by letter (case and spacing aside): see :func:`positional_credit`."""
    return positional_credit(" ".join(answer.lower().split()), target)


@register_task("caesar")
class Caesar(Task):
    category = "crypto"
    pure = True
    description = "Decode a Caesar cipher by shifting each letter back by the given amount."
    answer_shape = "decoded text in lowercase"
    params = (
        Param("letters", 3, 60, "letters of plaintext"),
        Param("max_shift", 3, 25, "largest shift"),
    )
    partial_credit = True

    def make(self, rng, p):
        plain = random_words(rng, p["letters"])
        k = rng.randint(1, p["max_shift"])
        cipher = shift_letters(plain, [k])
        statement = (
            f"This text was encrypted with a Caesar cipher: every letter was shifted {k} places forward in the "
            f"alphabet, wrapping from z to a; spaces were kept. Decode it by shifting every letter {k} places back.\n"
            f"Ciphertext: {cipher}\n{_DECODED_TEXT}"
        )
        return Example(f"caesar -{k} {cipher}", plain, plain, statement)

    def check(self, answer: str, problem: Problem):
        return score_plaintext(answer, problem.answer)


@register_task("vigenere")
class Vigenere(Task):
    category = "crypto"
    pure = True
    description = "Decode a Vigenere cipher with the given key (key letters advance on letters only)."
    answer_shape = "decoded text in lowercase"
    params = (
        Param("letters", 4, 60, "letters of plaintext"),
        Param("key_length", 2, 8, "letters in the key"),
    )
    partial_credit = True

    def make(self, rng, p):
        plain = random_words(rng, p["letters"])
        key = random_letters(rng, p["key_length"])
        cipher = shift_letters(plain, [_ALPHABET.index(c) for c in key])
        statement = (
            f"This text was encrypted with a Vigenere cipher with the key {key}: the letters of the text (spaces "
            "skipped) were shifted forward by the letters of the key in turn, a by 0, b by 1, … z by 25, the key "
            f"repeating; spaces were kept. Decode it.\nCiphertext: {cipher}\n{_DECODED_TEXT}"
        )
        return Example(f"vigenere key={key} {cipher}", plain, plain, statement)

    def check(self, answer: str, problem: Problem):
        return score_plaintext(answer, problem.answer)


_ATBASH = str.maketrans(_ALPHABET, _ALPHABET[::-1])


@register_task("atbash")
class Atbash(Task):
    category = "crypto"
    pure = True
    description = "Decode an Atbash cipher (a<->z, b<->y, ...)."
    answer_shape = "decoded text in lowercase"
    params = (Param("letters", 3, 60, "letters of plaintext"),)
    partial_credit = True

    def make(self, rng, p):
        plain = random_words(rng, p["letters"])
        cipher = plain.translate(_ATBASH)
        statement = (
            "This text was encrypted with the Atbash cipher, which reverses the alphabet: a and z swap, b and y, "
            f"c and x, and so on; spaces were kept. Decode it.\nCiphertext: {cipher}\n{_DECODED_TEXT}"
        )
        return Example(f"atbash {cipher}", plain, plain, statement)

    def check(self, answer: str, problem: Problem):
        return score_plaintext(answer, problem.answer)


_CODE_SEPARATORS_RE = re.compile(r"[\s,\-]+")


@register_task("letter_numbers")
class LetterNumbers(Task):
    category = "crypto"
    pure = True
    description = "A1Z26: turn letters into their alphabet positions, or positions back into letters."
    answer_shape = "alphabet positions"
    params = (Param("letters", 3, 30, "letters in the word"),)

    def make(self, rng, p):
        word = random_letters(rng, p["letters"])
        codes = [_ALPHABET.index(c) + 1 for c in word]
        if rng.random() < 0.5:
            statement = (
                f"Replace every letter of the word {word} by its position in the alphabet: a is 1, b is 2, c is 3, "
                "and so on.\nAnswer with numbers only: the alphabet positions separated by spaces, the first "
                "letter's position first."
            )
            return Example(f"a1z26 {word}", {"encode": True, "codes": codes}, " ".join(map(str, codes)), statement)
        statement = (
            f"Each number in {'-'.join(map(str, codes))} is the position of a letter in the alphabet: 1 is a, 2 is "
            "b, 3 is c, and so on. Write the word they spell.\n"
            "Answer with letters only: the letters at those alphabet positions as one lowercase word, the first "
            "number's letter first."
        )
        return Example(f"a1z26 {'-'.join(map(str, codes))}", {"encode": False, "codes": codes}, word, statement)

    def check(self, answer: str, problem: Problem):
        codes = problem.answer["codes"]
        if problem.answer["encode"]:
            parts = [s for s in _CODE_SEPARATORS_RE.split(answer.strip()) if s]
            if len(parts) > len(codes) * 2:
                return 0.0, "wrong"
            return float([parse_int(s) for s in parts] == codes)
        return float(answer.strip().lower() == "".join(_ALPHABET[c - 1] for c in codes))


@register_task("cryptarithm")
class Cryptarithm(Task):
    category = "crypto"
    pure = True
    description = "Give each letter a distinct digit (no leading zeros) so the sum holds; any valid answer counts."
    answer_shape = "LETTER=digit"
    params = (
        Param("digits", 2, 5, "digits per addend"),
        Param("addends", 2, 3, "numbers added"),
    )

    def make(self, rng, p):
        d = p["digits"]
        addends = [rng.randint(10 ** (d - 1), 10**d - 1) for _ in range(p["addends"])]
        total = sum(addends)
        letters = rng.sample(string.ascii_uppercase, 10)  # letters[i] stands for digit i

        def word(n: int) -> str:
            return "".join(letters[int(c)] for c in str(n))

        words = [word(n) for n in addends]
        used = sorted({c for w in words + [word(total)] for c in w})
        solution = " ".join(f"{c}={letters.index(c)}" for c in used)
        statement = (
            f"Solve the cryptarithm {' + '.join(words)} = {word(total)}: each letter stands for a digit, different "
            "letters for different digits, and no number starts with 0. Find digits that make the sum correct.\n"
            f"Answer with one LETTER=digit pair for each of the {len(used)} letters {', '.join(used)}, in that order, "
            "separated by spaces."
        )
        question = f"cryptarithm {'+'.join(words)}={word(total)}"
        return Example(question, {"addends": words, "total": word(total)}, solution, statement)

    def check(self, answer: str, problem: Problem):
        addends, total = problem.answer["addends"], problem.answer["total"]
        words = addends + [total]
        needed = {c for w in words for c in w}
        digits = {k: parse_int(v) for k, v in parse_assignment(answer, max_pairs=30, upper=True).items()}
        if set(digits) != needed:
            return 0.0, "wrong_letters"
        if any(not 0 <= v <= 9 for v in digits.values()) or len(set(digits.values())) != len(digits):
            return 0.0, "invalid_digits"
        if any(len(w) > 1 and digits[w[0]] == 0 for w in words):
            return 0.0, "leading_zero"

        def value(w: str) -> int:
            return int("".join(str(digits[c]) for c in w))

        return float(sum(value(w) for w in addends) == value(total))
