"""``polyrl train``: SFT warm start then multi-task RL."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def train() -> None:
        """Train a policy (not yet available)."""
        raise typer.Exit(1)
