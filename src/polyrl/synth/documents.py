"""Reading a folder of text documents and cutting them into chunks an LLM can write questions about.

Every file is either read or counted under the reason it was skipped (``binary``, ``not_utf8``, ``empty``,
``unreadable``), so a folder of PDFs and images gives a clear count, never a silently empty dataset.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from polyrl.errors import UserError

SNIFF_BYTES = 8192
MAX_DOCUMENT_BYTES = 20_000_000


@dataclass(frozen=True)
class Chunk:
    """A contiguous piece of one document: ``text == document[start:end]``."""

    doc: str
    """The document's path relative to the documents folder."""
    index: int
    """The chunk's number within its document (0-based)."""
    start: int
    end: int
    text: str


def _read_text(path: Path) -> tuple[str | None, str | None]:
    """The file's text, or None and the reason it is skipped."""
    try:
        if path.stat().st_size > MAX_DOCUMENT_BYTES:
            return None, "too_large"
        data = path.read_bytes()
    except OSError:
        return None, "unreadable"
    if b"\x00" in data[:SNIFF_BYTES]:
        return None, "binary"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not_utf8"
    if not text.strip():
        return None, "empty"
    return text, None


def read_documents(folder: str | Path) -> tuple[dict[str, str], Counter]:
    """Every readable text file under ``folder`` (recursively, hidden files skipped), by relative path, and a
    count of the files skipped per reason. A missing folder is a UserError."""
    root = Path(folder)
    if not root.is_dir():
        raise UserError(f"--docs {folder}: not a directory")
    docs: dict[str, str] = {}
    skipped: Counter = Counter()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in Path(rel).parts):
            continue
        text, reason = _read_text(path)
        if text is None:
            skipped[reason] += 1
        else:
            docs[rel] = text
    return docs, skipped


def chunk_document(doc: str, text: str, max_chars: int) -> list[Chunk]:
    """Consecutive chunks of at most ``max_chars`` characters, cut at paragraph breaks where possible, else at
    the last whitespace, else hard; whitespace-only chunks are dropped."""
    if max_chars < 1:
        raise UserError(f"chunk size must be positive, got {max_chars}")
    chunks, start = [], 0
    while start < len(text):
        end = min(start + max_chars, len(text))
        if end < len(text):
            window = text[start:end]
            cut = window.rfind("\n\n")
            if cut <= 0:
                cut = max(window.rfind("\n"), window.rfind(" "))
            if cut > 0:
                end = start + cut
        piece = text[start:end]
        if piece.strip():
            chunks.append(Chunk(doc, len(chunks), start, end, piece))
        start = end
    return chunks
