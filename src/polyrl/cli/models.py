"""``polyrl models …``: the named real models (presets) and the Hub cache; convert or fetch a model ahead of a run."""

from __future__ import annotations

import sys

import typer

from polyrl.errors import UserError

app = typer.Typer(
    help="Named real models and the Hugging Face cache: list them, convert or fetch one ahead of a run.",
    no_args_is_help=True,
)


@app.command("list")
def list_cmd() -> None:
    """Presets usable as model.path / --model, whether their package is installed and their checkpoint cached."""
    from polyrl.policy.hub import cached_models, hub_cache
    from polyrl.policy.presets import CACHE_ENV, cache_dir, preset_statuses

    for row in preset_statuses():
        if row.file is None:
            state = f"not installed ({row.preset.install}); not cached"
        else:
            state = (
                f"installed; cached at {row.cached}"
                if row.cached
                else "installed; not cached (converted on first use)"
            )
        print(f"{row.preset.name}: {row.preset.description}\n  {state}")
    print(f"cache: {cache_dir()} (set {CACHE_ENV} to move it); a local .gguf file works as a model path too")
    cached = cached_models()
    print(f"Hugging Face cache: {hub_cache()} (HF_HUB_CACHE), {len(cached)} model(s); a Hub id ORG/NAME works too")
    for repo_id, commits in cached:
        print(f"  {repo_id} ({', '.join(commits)})")


@app.command("prepare")
def prepare_cmd(
    model: str = typer.Argument(
        ..., help="A preset name (see `polyrl models list`), a local .gguf file or a Hugging Face Hub id."
    ),
    revision: str | None = typer.Option(None, "--revision", help="Hub ids: branch, tag or commit (default: main)."),
) -> None:
    """Make MODEL ready for a run now (a preset or .gguf file converted into its cached checkpoint, a Hub id taken
    from the Hub cache or downloaded into it) and print its directory."""
    from polyrl.policy.resolve import resolve_model

    if model == "tiny":
        raise UserError("the embedded model 'tiny' is built from its config: there is nothing to prepare")
    resolved = resolve_model(model, revision, log=_log)
    print(resolved.directory)


@app.command("pull")
def pull_cmd(
    model: str = typer.Argument(..., help="A Hugging Face Hub model id, ORG/NAME."),
    revision: str | None = typer.Option(None, "--revision", help="Branch, tag or commit (default: main)."),
) -> None:
    """Fetch MODEL's newest files at --revision from the Hugging Face Hub into its cache (HF_HUB_CACHE; HF_TOKEN for
    gated or private models) and print the snapshot's directory and commit. Runs then load it offline."""
    from polyrl.policy.hub import pull

    snapshot = pull(model, revision, log=_log)
    print(f"{snapshot.path}\ncommit: {snapshot.commit}")


def _log(message: str) -> None:
    print(f"polyrl: {message}", file=sys.stderr, flush=True)
