"""``polyrl synth``: new problems for the task library, from documents (``qa``)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from polyrl.errors import UserError

app = typer.Typer(help="Synthesize new verifiable problems.", no_args_is_help=True)


@app.command()
def qa(
    docs: Path = typer.Option(..., "--docs", help="Folder of text documents (read recursively)."),
    endpoint: str = typer.Option(..., "--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1."),
    model: str = typer.Option(..., "--model", help="Model name sent to the endpoint."),
    out: Path = typer.Option(..., "--out", help="Dataset file to write (.jsonl or .parquet)."),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="Environment variable holding the API key."),
    pairs_per_chunk: int = typer.Option(3, "--pairs-per-chunk", min=1, help="Pairs asked for per chunk."),
    chunk_chars: int = typer.Option(1500, "--chunk-chars", min=100, help="Longest chunk of a document per request."),
    max_answer_words: int = typer.Option(8, "--max-answer-words", min=1, help="Longer answers are rejected."),
    leak_check: list[Path] = typer.Option(
        [], "--leak-check", help="Eval problem/dataset file (.jsonl/.parquet) whose prompts must not leak; repeatable."
    ),
    leak_ngram: int = typer.Option(
        8, "--leak-ngram", min=0, help="Shared word n-gram that counts as a leak (0: exact)."
    ),
    solve_check: bool = typer.Option(False, "--solve-check", help="Keep only pairs a second call answers right."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Requests in flight."),
    timeout: float = typer.Option(60.0, "--timeout", min=0.1, help="Per-request timeout in seconds."),
    retries: int = typer.Option(
        2, "--retries", min=0, help="Retries of a request that times out or fails with 5xx/429."
    ),
) -> None:
    """Turn documents into question/answer pairs with an LLM; keep those that pass the checks; write a dataset."""
    from polyrl.synth.qa import QAConfig, endpoint_ask, leak_index_from_files, synthesize_qa, write_qa_dataset

    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise UserError(f"--api-key-env {api_key_env}: that environment variable is not set")
    cfg = QAConfig(chunk_chars, pairs_per_chunk, max_answer_words, leak_ngram, solve_check)
    leak = leak_index_from_files(leak_check, leak_ngram) if leak_check else None
    ask = endpoint_ask(endpoint, model, api_key, timeout, retries)
    report = synthesize_qa(docs, ask, model, cfg, leak, concurrency)
    summary = report.summary()
    for key, value in summary.items():
        print(f"{key:16s} {value}")
    path = write_qa_dataset(report, out)
    print(f"written: {path} ({len(report.rows)} rows; counts in {path}.report.json)")
    print(f"train on it: tasks: [{{dataset: {path}, name: {path.stem}, verifier: normalized}}]")
