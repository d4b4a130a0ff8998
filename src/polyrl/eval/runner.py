"""Run a suite against a completion source, resumably.

Output directory::

    OUT/run.json        what is being evaluated: the suite (with its fingerprint) and the model
    OUT/samples.jsonl   one line per completion, appended as each finishes (survives interruption); a problem's
                        images (base64 PNG) on its greedy sample's line
    OUT/results.json    the aggregated results, written atomically once every sample is in
    OUT/results.md      the same as Markdown tables
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from polyrl.errors import UserError
from polyrl.eval.endpoint_source import EndpointError
from polyrl.eval.results import aggregate, problem_key, results_markdown
from polyrl.eval.sources import Completion, CompletionSource, SampleRequest, chat_messages, plays_episodes
from polyrl.eval.suite import EvalItem, EvalSuite, SuiteTasks, suite_items
from polyrl.run_dir import atomic_write_text
from polyrl.tasks.base import check_modalities
from polyrl.tasks.images import png_base64


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The complete records of a samples file; a line cut by an interruption is dropped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "problem_key" in record and "sample" in record:
            records.append(record)
    return records


def _prepare(out: Path, header: dict[str, Any], resume: bool) -> list[dict[str, Any]]:
    """Check the output directory against what is being run; return the records already there."""
    samples, run_file = out / "samples.jsonl", out / "run.json"
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        if samples.exists() or run_file.exists():
            raise UserError(
                f"{str(out)!r} already holds an evaluation: pass --resume to continue it, or another --out"
            )
        atomic_write_text(run_file, json.dumps(header, indent=2))
        return []
    if not run_file.exists():
        raise UserError(f"nothing to resume in {str(out)!r} (no run.json): run without --resume")
    try:
        before = json.loads(run_file.read_text())
    except ValueError:
        raise UserError(f"{run_file} is not valid JSON: cannot resume") from None
    if before.get("fingerprint") != header["fingerprint"] or before.get("model") != header["model"]:
        raise UserError(
            f"{str(out)!r} holds an evaluation of another suite or model ({before.get('model')}): use another --out"
        )
    records = read_samples(samples)
    # rewrite without a half-written last line, so the next append starts on a fresh line
    atomic_write_text(samples, "".join(json.dumps(r) + "\n" for r in records))
    return records


def _requests(
    items: list[EvalItem], suite: EvalSuite, field: str, done: set[tuple[str, int]], style: str | None
) -> list[SampleRequest]:
    sampled = suite.samples if suite.samples > 1 else 0
    out = []
    for item in items:
        messages = chat_messages(item.problem, field, suite.system, style)
        for index in range(1 + sampled):
            key = problem_key(item)
            if (key, index) not in done:
                out.append(
                    SampleRequest(
                        f"{key}|{index}",
                        item.problem,
                        messages,
                        index == 0,
                        suite.temperature,
                        suite.top_p,
                        suite.max_new_tokens,
                    )
                )
    return out


def _episodic(tasks: dict[str, Any], source: CompletionSource) -> list[str]:
    """The suite's tasks that play episodes; a source that cannot play them (an endpoint) is a UserError."""
    episodic = sorted(name for name, task in tasks.items() if plays_episodes(task))
    if episodic and not hasattr(source, "play"):
        raise UserError(
            f"task {episodic[0]} plays multi-turn episodes, which polyrl eval plays with a local --model; "
            f"{source.description} is asked single-turn tasks only"
        )
    return episodic


def _described(item: EvalItem, request: SampleRequest, completion: Completion, verdict) -> dict[str, Any]:
    """A sample's record in ``samples.jsonl`` besides its key: the problem, the completion, its verdict; the greedy
    sample of a problem with images also holds them (``images``, base64 PNG text)."""
    record = {
        "task": item.task,
        "category": item.category,
        "difficulty": item.difficulty,
        "seed": item.problem.seed,
        "greedy": request.greedy,
        "response": completion.text,
        "tokens": completion.tokens,
        "finished": completion.finished,
        "correct": verdict.correct,
        "score": verdict.score,
        "format_ok": verdict.format_ok,
        "reason": verdict.reason,
        "answer": verdict.answer,
    }
    if request.greedy and item.problem.images:
        record["images"] = [png_base64(image) for image in item.problem.images]
    return record


def run_suite(
    suite: EvalSuite,
    source: CompletionSource,
    out: str | Path,
    field: str,
    model: str,
    resume: bool = False,
    log: Callable[[str], None] = lambda _: None,
    style: str | None = None,
    resolve: SuiteTasks | None = None,
) -> dict[str, Any]:
    """Evaluate every missing sample of ``suite``, then write and return the aggregated results. ``resolve``
    names the tasks (default: as a training mix without a config does). Tasks that play episodes
    (environments, harness agents, ``vf/`` tasksets) are played by ``source.play``: a local checkpoint."""
    out = Path(out)
    resolve = resolve or SuiteTasks()
    tasks = {t.name: resolve(t.name, suite.answer_format) for t in suite.tasks}
    check_modalities(tasks, source.modalities, model)
    episodic = _episodic(tasks, source)
    header = {
        "suite": suite.model_dump(),
        "fingerprint": suite.fingerprint(),
        "model": model,
        "prompt_field": field,
        "prompt_style": style or "terse",
    }
    records = _prepare(out, header, resume)
    items = suite_items(suite, resolve)
    by_key = {problem_key(i): i for i in items}
    todo = _requests(items, suite, field, {(r["problem_key"], r["sample"]) for r in records}, style)
    log(f"{len(items)} problems, {len(records)} samples already done, {len(todo)} to go ({source.description})")
    samples_file = out / "samples.jsonl"
    started = time.perf_counter()

    with samples_file.open("a") as f:

        def on_done(request: SampleRequest, completion: Completion) -> None:
            key, _, index = request.key.rpartition("|")
            item = by_key[key]
            # an episode brings its own verdict; a completion is verified (never raises, whatever the text)
            verdict = completion.verdict or tasks[item.task].verify(item.problem, completion.text)
            record = {
                "problem_key": key,
                "sample": int(index),
                **_described(item, request, completion, verdict),
            }
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            records.append(record)
            if len(records) % 200 == 0:
                log(f"  {len(records)} samples ({time.perf_counter() - started:.0f} s)")

        try:
            source.complete([r for r in todo if r.problem.task not in episodic], on_done)
            if episodic:
                source.play([r for r in todo if r.problem.task in episodic], tasks, on_done)
        except EndpointError as exc:
            raise EndpointError(
                f"{exc} — {len(records)} samples are saved in {samples_file}; rerun with --resume"
            ) from None

    k = suite.samples if suite.samples > 1 else 1
    results = {
        "suite": suite.name,
        "fingerprint": suite.fingerprint(),
        "model": model,
        "k": k,
        "temperature": suite.temperature,
        "max_new_tokens": suite.max_new_tokens,
        "problems_total": len(items),
        "problems_done": len({r["problem_key"] for r in records if r["sample"] == 0}),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **aggregate(items, records, k, tasks),
    }
    atomic_write_text(out / "results.json", json.dumps(results, indent=2))
    atomic_write_text(out / "results.md", results_markdown(results))
    return results
