"""``polyrl push``: a run's final model (or its LoRA adapter) to the Hugging Face Hub."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def push(
        run_dir: Path = typer.Argument(
            ..., help="A polyrl run directory (its final_model is pushed) or a saved model directory."
        ),
        repo_id: str = typer.Argument(..., help="The Hub repository, ORG/NAME (created when missing)."),
        private: bool = typer.Option(False, "--private", help="Create the repository private."),
        adapter_only: bool = typer.Option(
            False, "--adapter-only", help="Push the LoRA adapter (adapter/) alone, not the merged model."
        ),
    ) -> None:
        """Upload the model with its card, the run's config and the tokenizer (HF_TOKEN or `hf auth login`)."""
        from polyrl.train.push import push as push_model

        pushed = push_model(run_dir, repo_id, private=private, adapter_only=adapter_only)
        print(f"pushed {len(pushed.files)} files of {pushed.source} to {pushed.repo_id}: {pushed.url}")
