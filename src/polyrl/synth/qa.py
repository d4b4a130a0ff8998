"""Documents → verifiable question–answer pairs (after Webscale-RL, Cen et al. 2025: pre-training text turned into
RL data by an LLM, kept only where checks pass).

For each document chunk an OpenAI-compatible endpoint writes question/answer pairs as JSON; each pair is kept
only if it passes every filter, in this order (the first failure is the reason it is counted under):

* ``malformed`` — not an object with a non-empty string ``question`` and ``answer`` of bounded length;
* ``answer_too_long`` — more than ``max_answer_words`` words (short answers are what a verifier can match);
* ``answer_in_question`` — the answer is written in the question;
* ``not_grounded`` — the answer does not occur in the chunk (after normalization: case, whitespace, quotes);
* ``duplicate`` — the same question (normalized) was kept already;
* ``eval_leak`` — the question equals an eval prompt or shares a ``leak_ngram``-word sequence with one;
* ``unsolved`` — with ``solve_check``, a second call answering the question from the chunk did not match.

Every chunk whose request failed (timeout, refusal, connection) or whose reply held no JSON is counted too; a
run in which no pair survives is a :class:`~polyrl.errors.UserError` that shows those counts.
The file written has one row per pair — ``question``, ``answer`` and its provenance — and is read by the
dataset task loader (``tasks: [{dataset: FILE, verifier: normalized}]``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyrl.errors import UserError
from polyrl.synth.documents import Chunk, chunk_document, read_documents

MAX_QUESTION_CHARS = 500
MAX_ANSWER_CHARS = 200

WRITE_PROMPT = """Read the text below and write {n} question-answer pairs about facts it states.
Each answer must be a short phrase copied exactly from the text (a name, number, date or term), at most
{words} words, and must not appear in its question. Each question must make sense without the text.
Reply with a JSON list only: [{{"question": "...", "answer": "..."}}, ...]

Text:
{chunk}"""

SOLVE_PROMPT = """Answer the question using the text. Reply with the answer only: a short phrase copied from the text.

Text:
{chunk}

Question: {question}"""


@dataclass(frozen=True)
class QAConfig:
    """How many pairs to ask for and how strictly to filter them."""

    chunk_chars: int = 1500
    """Longest chunk of a document shown in one request."""
    pairs_per_chunk: int = 3
    """Pairs asked for per chunk."""
    max_answer_words: int = 8
    """Longer answers are rejected: short answers are what a string verifier can check."""
    leak_ngram: int = 8
    """A question sharing a run of this many words with an eval prompt is a leak (0: exact matches only)."""
    solve_check: bool = False
    """Ask the endpoint a second time to answer each question from its chunk; keep pairs it answers right."""
    max_new_tokens: int = 512
    """Longest reply to a writing request."""


@dataclass
class QAReport:
    """What happened to every file, chunk and pair: counts per reason, and the pairs kept."""

    documents: int = 0
    skipped_files: Counter = field(default_factory=Counter)
    chunks: int = 0
    failed_requests: Counter = field(default_factory=Counter)
    """Chunks whose writing request failed, per reason (``endpoint_error``, ``no_json``)."""
    proposed: int = 0
    rejected: Counter = field(default_factory=Counter)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "skipped_files": dict(self.skipped_files),
            "chunks": self.chunks,
            "failed_requests": dict(self.failed_requests),
            "proposed_pairs": self.proposed,
            "rejected_pairs": dict(self.rejected),
            "kept_pairs": len(self.rows),
        }


# -- parsing the writer's reply ---------------------------------------------------------------------------------
def parse_pairs(reply: str) -> list[Any] | None:
    """The JSON list in ``reply`` (also inside a code fence or after prose), or the JSON objects one per line;
    None when there is none. Items are returned as they are: :func:`check_pair` judges each."""
    text = reply.strip()
    start, end = text.find("["), text.rfind("]")
    if 0 <= start < end:
        try:
            value = json.loads(text[start : end + 1])
        except json.JSONDecodeError:
            value = None
        if isinstance(value, list):
            return value
    items = []
    for line in text.splitlines():
        line = line.strip().rstrip(",")
        if line.startswith("{") and line.endswith("}"):
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return items or None


# -- filters ----------------------------------------------------------------------------------------------------
def normalize(text: str) -> str:
    """NFKC, case-folded, quotes and surrounding punctuation stripped, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[\"'`“”‘’]", "", text)
    return " ".join(text.split()).strip(" .,;:!?")


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", normalize(text))


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _words(text)
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass
class LeakIndex:
    """Eval prompts to keep out of synthesized data: exact (normalized) matches and shared word n-grams."""

    n: int
    exact: set[str] = field(default_factory=set)
    grams: set[tuple[str, ...]] = field(default_factory=set)

    def add(self, prompt: str) -> None:
        self.exact.add(normalize(prompt))
        if self.n > 0:
            self.grams |= ngrams(prompt, self.n)

    def leaks(self, question: str) -> bool:
        return normalize(question) in self.exact or (
            self.n > 0 and not self.grams.isdisjoint(ngrams(question, self.n))
        )


def leak_index_from_files(paths: Iterable[str | Path], n: int) -> LeakIndex:
    """Every ``question`` and ``prompt`` string of the rows of ``paths`` (.jsonl/.parquet problem or dataset files)."""
    from polyrl.tasks.io import read_rows

    index = LeakIndex(n)
    for path in paths:
        for row in read_rows(path):
            for key in ("question", "prompt", "natural_question"):
                if isinstance(row.get(key), str):
                    index.add(row[key])
    return index


def check_pair(item: Any, chunk: Chunk, cfg: QAConfig) -> tuple[tuple[str, str] | None, str | None]:
    """``(question, answer)`` if ``item`` passes the filters that need only the pair and its chunk, else the reason."""
    if not isinstance(item, dict):
        return None, "malformed"
    question, answer = item.get("question"), item.get("answer")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if not (isinstance(question, str) and isinstance(answer, str)):
        return None, "malformed"
    question, answer = question.strip(), answer.strip()
    if not question or not normalize(answer) or len(question) > MAX_QUESTION_CHARS or len(answer) > MAX_ANSWER_CHARS:
        return None, "malformed"
    if len(_words(answer)) > cfg.max_answer_words:
        return None, "answer_too_long"
    if f" {normalize(answer)} " in f" {normalize(question)} ":
        return None, "answer_in_question"
    if normalize(answer) not in normalize(chunk.text):
        return None, "not_grounded"
    return (question, answer), None


# -- the pipeline -----------------------------------------------------------------------------------------------
Ask = Callable[[str, int], str]
"""``ask(prompt, max_new_tokens) -> reply``; may raise when the endpoint fails (counted as ``endpoint_error``)."""


def endpoint_ask(url: str, model: str, api_key: str | None, timeout: float, retries: int) -> Ask:
    """An :data:`Ask` over the OpenAI-compatible client ``polyrl eval`` uses (greedy decoding)."""
    from polyrl.eval.endpoint_source import EndpointSource
    from polyrl.eval.sources import SampleRequest
    from polyrl.tasks.base import Problem

    source = EndpointSource(url, model, api_key, timeout=timeout, retries=retries)
    placeholder = Problem("synth/qa", "", "", None, None, 0, "train", None, {})

    def ask(prompt: str, max_new_tokens: int) -> str:
        messages = [{"role": "user", "content": prompt}]
        return source.request(SampleRequest("qa", placeholder, messages, True, 0.0, 1.0, max_new_tokens)).text

    return ask


def _call(ask: Ask, prompt: str, max_new_tokens: int) -> tuple[str | None, str | None]:
    try:
        reply = ask(prompt, max_new_tokens)
    except Exception:  # any endpoint failure (after its retries) is counted, never fatal
        return None, "endpoint_error"
    return (reply, None) if isinstance(reply, str) else (None, "endpoint_error")


def _write_for(ask: Ask, chunk: Chunk, cfg: QAConfig) -> tuple[list[Any] | None, str | None]:
    prompt = WRITE_PROMPT.format(n=cfg.pairs_per_chunk, words=cfg.max_answer_words, chunk=chunk.text)
    reply, error = _call(ask, prompt, cfg.max_new_tokens)
    if error is not None:
        return None, error
    items = parse_pairs(reply)
    return (items, None) if items is not None else (None, "no_json")


def solves(ask: Ask, chunk: Chunk, question: str, answer: str) -> bool:
    """The solvability check: the endpoint, shown the chunk, answers ``question`` with ``answer`` (normalized)."""
    reply, error = _call(ask, SOLVE_PROMPT.format(chunk=chunk.text, question=question), 64)
    return error is None and normalize(reply) == normalize(answer)


def provenance(chunk: Chunk, model: str) -> dict[str, Any]:
    """Where a pair came from: the document, the chunk's character span, and the writing model."""
    return {"source_doc": chunk.doc, "source_chunk": chunk.index, "source_start": chunk.start,
            "source_end": chunk.end, "generator": model}  # fmt: skip


def synthesize_qa(
    docs_dir: str | Path,
    ask: Ask,
    model: str,
    cfg: QAConfig,
    leak: LeakIndex | None = None,
    concurrency: int = 4,
) -> QAReport:
    """Read ``docs_dir``, ask for pairs per chunk (``concurrency`` requests at a time), filter them."""
    report = QAReport()
    docs, report.skipped_files = read_documents(docs_dir)
    report.documents = len(docs)
    chunks = [c for name, text in docs.items() for c in chunk_document(name, text, cfg.chunk_chars)]
    report.chunks = len(chunks)
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="polyrl-synth") as pool:
        replies = list(pool.map(lambda c: _write_for(ask, c, cfg), chunks))
    seen: set[str] = set()
    for chunk, (items, error) in zip(chunks, replies):
        if error is not None:
            report.failed_requests[error] += 1
            continue
        for item in items:
            report.proposed += 1
            pair, reason = check_pair(item, chunk, cfg)
            if pair is not None and normalize(pair[0]) in seen:
                reason = "duplicate"
            elif pair is not None and leak is not None and leak.leaks(pair[0]):
                reason = "eval_leak"
            elif pair is not None and cfg.solve_check and not solves(ask, chunk, *pair):
                reason = "unsolved"
            if reason is not None:
                report.rejected[reason] += 1
                continue
            seen.add(normalize(pair[0]))
            row = {"question": pair[0], "answer": pair[1], **provenance(chunk, model)}
            row["solve_checked"] = cfg.solve_check
            report.rows.append(row)
    return report


def write_qa_dataset(report: QAReport, out: str | Path) -> Path:
    """The kept pairs as a .jsonl/.parquet dataset file, and ``<out>.report.json`` with the counts. No kept pair
    is a UserError naming what went wrong (nothing is written)."""
    from polyrl.tasks.io import write_rows

    if not report.rows:
        counts = json.dumps(report.summary(), sort_keys=True)
        raise UserError(f"no question-answer pair survived, nothing written: {counts}")
    path = write_rows(out, report.rows)
    Path(f"{path}.report.json").write_text(json.dumps(report.summary(), indent=2, sort_keys=True) + "\n")
    return path
