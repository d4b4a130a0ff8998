"""``polyrl serve``: an OpenAI-compatible chat-completions server for a checkpoint."""

from __future__ import annotations

import typer

from polyrl.errors import UserError
from polyrl.serve.limits import ServeLimits


def _limit(field: str, **bounds):
    """A CLI option for one ServeLimits field: its default and its description, from the one place they live."""
    info = ServeLimits.model_fields[field]
    return typer.Option(info.default, "--" + field.replace("_", "-"), help=info.description, **bounds)


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        checkpoint: str = typer.Argument(..., help="Hugging Face checkpoint directory (e.g. RUN_DIR/final_model)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind (127.0.0.1: this machine only)."),
        port: int = typer.Option(8000, "--port", min=1, max=65535, help="TCP port."),
        model_name: str | None = typer.Option(
            None, "--model-name", help="Name in /v1/models (default: the directory name)."
        ),
        max_request_bytes: int = _limit("max_request_bytes", min=1024),
        max_messages: int = _limit("max_messages", min=1),
        max_prompt_tokens: int | None = _limit("max_prompt_tokens", min=1),
        default_max_tokens: int = _limit("default_max_tokens", min=1),
        max_tokens: int = _limit("max_tokens", min=1),
        max_waiting: int = _limit("max_waiting", min=0),
        retry_after_s: int = _limit("retry_after_s", min=1),
        threads: int | None = typer.Option(
            None, "--threads", min=1, help="torch CPU threads (default: half the CPU cores, 1 to 4)."
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

        limits = ServeLimits(
            max_request_bytes=max_request_bytes,
            max_messages=max_messages,
            max_prompt_tokens=max_prompt_tokens,
            default_max_tokens=default_max_tokens,
            max_tokens=max_tokens,
            max_waiting=max_waiting,
            retry_after_s=retry_after_s,
        )
        check_model_dir(checkpoint)
        run_server(checkpoint, host, port, model_name, limits, threads)
