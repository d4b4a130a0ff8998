"""``polyrl eval``: evaluate a checkpoint or an OpenAI-compatible endpoint on a suite; ``polyrl eval compare``."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from polyrl.device import DEFAULT_DEVICE
from polyrl.errors import UserError
from polyrl.tasks.base import DEFAULT_DIFFICULTY

app = typer.Typer(
    help="Evaluate a checkpoint or an endpoint on a task suite; compare results.",
    invoke_without_command=True,
    no_args_is_help=True,
)


def _source(
    device: str,
    model: str | None,
    revision: str | None,
    endpoint: str | None,
    api_key_env: str | None,
    model_name: str | None,
    concurrency: int,
    timeout: float,
    field: str,
    suite,
    style: str,
    tasks,
):
    if (model is None) == (endpoint is None):
        raise UserError("give exactly one of --model PATH or --endpoint URL")
    if revision is not None and model is None:
        raise UserError("--revision goes with --model (a Hub id); an endpoint serves its own model")
    if model is not None:
        from transformers.utils import logging as hf_logging

        from polyrl.device import resolve_device
        from polyrl.eval.sources import LocalModelSource
        from polyrl.policy.loading import ModelConfig, load_policy

        hf_logging.disable_progress_bar()
        config = ModelConfig(path=model, revision=revision)
        policy = load_policy(config, seed=suite.seed, device=resolve_device(device))
        source = LocalModelSource(policy, field, suite.system, seed=suite.seed, style=style, env=tasks.env_config)
        pinned = f" at commit {policy.source.commit}" if policy.source.kind == "hub" else ""
        return source, f"checkpoint {model}{pinned}"
    from polyrl.eval.endpoint_source import EndpointSource

    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise UserError(f"--api-key-env {api_key_env}: that environment variable is not set")
    name = model_name or "default"
    return EndpointSource(endpoint, name, api_key, concurrency, timeout), f"endpoint {endpoint} model {name}"


def _suite_tasks(config: Path | None):
    """How the suite's task names resolve: as a training mix's, with ``--config``'s entries (datasets,
    ``harness:`` agents) and ``env`` settings — the tasks and settings the trainer's own evaluation uses."""
    from polyrl.eval.suite import SuiteTasks

    if config is None:
        return SuiteTasks()
    from polyrl.tasks.dataset import load_config_datasets
    from polyrl.train.config import load_config

    cfg = load_config(config)
    load_config_datasets(config)  # every dataset of the mix, so that env/retry:<dataset> names resolve too
    return SuiteTasks({spec.name: spec for spec in cfg.tasks}, cfg.env)


@app.callback()
def eval_cmd(
    ctx: typer.Context,
    model: str | None = typer.Option(
        None,
        "--model",
        help="Local Hugging Face checkpoint (e.g. RUN_DIR/final_model), a preset name, a .gguf file or a Hub id.",
    ),
    revision: str | None = typer.Option(
        None, "--revision", help="With a Hub id: branch, tag or commit (default: main)."
    ),
    endpoint: str | None = typer.Option(
        None, "--endpoint", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1."
    ),
    api_key_env: str | None = typer.Option(None, "--api-key-env", help="Environment variable holding the API key."),
    model_name: str | None = typer.Option(None, "--model-name", help="Model name sent to the endpoint."),
    suite_file: Path | None = typer.Option(
        None, "--suite", help="Suite YAML (tasks, difficulties, n, seeds, samples)."
    ),
    tasks: str | None = typer.Option(None, "--tasks", help="Comma-separated tasks (instead of --suite)."),
    config: Path | None = typer.Option(
        None,
        "--config",
        help="A training config: its tasks (datasets, harness agents) and env settings, as training uses them.",
    ),
    difficulty: str = typer.Option(
        DEFAULT_DIFFICULTY, "--difficulty", help="With --tasks: comma-separated knobs or presets."
    ),
    n: int | None = typer.Option(
        None, "--n", min=1, help="With --tasks: problems per task and difficulty (default: a suite task's n)."
    ),
    samples: int | None = typer.Option(
        None,
        "--samples",
        min=1,
        help="With --tasks: sampled completions per problem (pass@k, maj@k; default: a suite's samples).",
    ),
    out: Path | None = typer.Option(None, "--out", help="Output directory (default: evals/<time>)."),
    device: str = typer.Option(
        DEFAULT_DEVICE, "--device", help="With --model: where it runs (auto: CUDA when present, else the CPU)."
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted evaluation in --out."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Endpoint requests in flight."),
    timeout: float = typer.Option(60.0, "--timeout", min=0.1, help="Per-request timeout in seconds (endpoint)."),
    max_new_tokens: int | None = typer.Option(
        None, "--max-new-tokens", min=1, help="Override the suite's response limit."
    ),
    temperature: float | None = typer.Option(
        None, "--temperature", min=0.0, help="Override the suite's sampling temperature."
    ),
) -> None:
    """Evaluate --model or --endpoint on --suite (or --tasks); writes results.json, results.md, samples.jsonl."""
    if ctx.invoked_subcommand is not None:
        return
    from polyrl.eval.results import results_markdown
    from polyrl.eval.runner import run_suite
    from polyrl.eval.suite import load_suite, suite_from_options
    from polyrl.policy.prompts import default_style, run_prompt_field

    if (suite_file is None) == (tasks is None):
        raise UserError("give exactly one of --suite FILE or --tasks a,b,c")
    resolve = _suite_tasks(config)
    overrides = {"max_new_tokens": max_new_tokens, "temperature": temperature}
    if suite_file is not None:
        suite = load_suite(suite_file, {k: v for k, v in overrides.items() if v is not None}, resolve)
    else:
        suite = suite_from_options(tasks, difficulty, n, samples, resolve, **overrides)
    field = suite.prompt_field or (run_prompt_field(model) if model else None) or "prompt"
    # a polyrl run's own style; otherwise the model's default (an endpoint serves an LLM: natural)
    style = default_style(model) if model else "natural"
    if out is None:
        import time

        out = Path("evals") / time.strftime("%Y%m%d-%H%M%S")
    source, description = _source(
        device, model, revision, endpoint, api_key_env, model_name, concurrency, timeout, field, suite, style, resolve
    )
    log = lambda m: print(m, flush=True)
    results = run_suite(suite, source, out, field, description, resume, log=log, style=style, resolve=resolve)
    print(results_markdown(results))
    print(f"written: {out / 'results.json'}, {out / 'results.md'}, {out / 'samples.jsonl'}")


@app.command("compare")
def compare_cmd(
    files: list[Path] = typer.Argument(
        ..., help="results.json files (or their directories); the first is the baseline."
    ),
    metric: str = typer.Option(
        "accuracy", "--metric", help="accuracy, pass@1, pass@K, maj@K, mean_length, format_failure_rate."
    ),
) -> None:
    """Side-by-side table of one metric per task, with differences (points) against the first file."""
    from polyrl.eval.results import compare_table, load_results

    if len(files) < 2:
        raise UserError("compare needs at least two results files")
    loaded = {}
    for path in files:
        label = path.parent.name if path.name == "results.json" else path.name
        while label in loaded:
            label += "'"
        loaded[label] = load_results(path)
    print(compare_table(loaded, metric))
