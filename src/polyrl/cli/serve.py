"""``polyrl serve``: an OpenAI-compatible chat-completions server for a checkpoint."""

from __future__ import annotations

import typer

from polyrl.errors import UserError


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        checkpoint: str = typer.Argument(..., help="Hugging Face checkpoint directory (e.g. RUN_DIR/final_model)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind (127.0.0.1: this machine only)."),
        port: int = typer.Option(8000, "--port", min=1, max=65535, help="TCP port."),
        model_name: str | None = typer.Option(
            None, "--model-name", help="Name in /v1/models (default: the directory name)."
        ),
    ) -> None:
        """Serve CHECKPOINT at /v1/chat/completions, /v1/models and /health."""
        try:
            import fastapi  # noqa: F401
            import uvicorn  # noqa: F401
        except ImportError:
            raise UserError("polyrl serve needs FastAPI and uvicorn: pip install 'polyrl[serve]'") from None
        from polyrl.policy.loading import check_model_dir
        from polyrl.serve.app import serve as run_server

        check_model_dir(checkpoint)
        run_server(checkpoint, host, port, model_name)
