"""``polyrl models …``: the named real models (presets), whether each is installed and cached; convert ahead."""

from __future__ import annotations

import typer

from polyrl.errors import UserError

app = typer.Typer(
    help="Named real models: list them, convert one into the cache ahead of a run.", no_args_is_help=True
)


@app.command("list")
def list_cmd() -> None:
    """Presets usable as model.path / --model, whether their package is installed and their checkpoint cached."""
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


@app.command("prepare")
def prepare_cmd(
    model: str = typer.Argument(..., help="A preset name (see `polyrl models list`) or a local .gguf file."),
) -> None:
    """Convert MODEL into its cached Hugging Face checkpoint now (runs do it on first use) and print its path."""
    from polyrl.policy.presets import PRESETS, is_gguf_path, resolve_model_path

    if model not in PRESETS and not is_gguf_path(model):
        raise UserError(f"unknown model {model!r}: give a preset ({', '.join(PRESETS)}) or a .gguf file")
    print(resolve_model_path(model))
