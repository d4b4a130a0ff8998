"""``polyrl serve``: an OpenAI-compatible chat-completions server for a checkpoint."""

from __future__ import annotations

import typer

from polyrl.device import DEFAULT_DEVICE
from polyrl.errors import UserError
from polyrl.serve.limits import ServeLimits


def _limit(field: str):
    """A CLI option for one ServeLimits field: its default and description, from where they live (its bounds are
    checked by ServeLimits itself)."""
    info = ServeLimits.model_fields[field]
    return typer.Option(info.default, "--" + field.replace("_", "-"), help=info.description)


def _limits(**values) -> ServeLimits:
    """ServeLimits from the options; a value out of bounds is a one-line UserError naming the option."""
    from pydantic import ValidationError

    try:
        return ServeLimits(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UserError(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}") from None


def register(app: typer.Typer) -> None:
    @app.command()
    def serve(
        checkpoint: str = typer.Argument(
            ...,
            help="Hugging Face checkpoint directory (e.g. RUN_DIR/final_model), a preset name, a .gguf file or a Hub id.",
        ),
        revision: str | None = typer.Option(
            None, "--revision", help="Hub ids: branch, tag or commit (default: main)."
        ),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind (127.0.0.1: this machine only)."),
        port: int = typer.Option(8000, "--port", help="TCP port (1-65535)."),
        model_name: str | None = typer.Option(
            None,
            "--model-name",
            help="Name in /v1/models (default: a Hub id or preset as given, else the directory name).",
        ),
        max_request_bytes: int = _limit("max_request_bytes"),
        max_messages: int = _limit("max_messages"),
        max_prompt_tokens: int | None = _limit("max_prompt_tokens"),
        default_max_tokens: int = _limit("default_max_tokens"),
        max_tokens: int = _limit("max_tokens"),
        max_waiting: int = _limit("max_waiting"),
        retry_after_s: int = _limit("retry_after_s"),
        max_connections: int = _limit("max_connections"),
        header_timeout_s: float = _limit("header_timeout_s"),
        idle_timeout_s: float = _limit("idle_timeout_s"),
        threads: int | None = typer.Option(
            None, "--threads", help="torch CPU threads (default: half the CPU cores, 1 to 4)."
        ),
        device: str = typer.Option(
            DEFAULT_DEVICE, "--device", help="Where the model runs: auto (CUDA when present, else the CPU), cpu, cuda."
        ),
    ) -> None:
        """Serve CHECKPOINT at /v1/chat/completions, /v1/models and /health."""
        try:
            import fastapi  # noqa: F401
            import uvicorn  # noqa: F401
        except ImportError:
            raise UserError("polyrl serve needs FastAPI and uvicorn: pip install 'polyrl[serve]'") from None
        from polyrl.device import resolve_device
        from polyrl.policy.loading import check_model_dir
        from polyrl.policy.resolve import resolve_model
        from polyrl.policy.threads import check_threads
        from polyrl.serve.app import serve as run_server

        placed = resolve_device(device)  # before anything loads: a missing GPU is one line
        if not 1 <= port <= 65535:
            raise UserError(f"--port: {port} is not a TCP port (1-65535)")
        if threads is not None and threads < 1:
            raise UserError(f"--threads: {threads}; give 1 or more")
        try:
            threads = threads if threads is None else check_threads(threads)
        except ValueError as exc:
            raise UserError(f"--threads: {exc}") from None
        limits = _limits(
            max_request_bytes=max_request_bytes,
            max_messages=max_messages,
            max_prompt_tokens=max_prompt_tokens,
            default_max_tokens=default_max_tokens,
            max_tokens=max_tokens,
            max_waiting=max_waiting,
            retry_after_s=retry_after_s,
            max_connections=max_connections,
            header_timeout_s=header_timeout_s,
            idle_timeout_s=idle_timeout_s,
        )
        resolved = resolve_model(checkpoint, revision)
        if resolved.directory is None:
            raise UserError("polyrl serve serves a checkpoint; the embedded 'tiny' model has none (train it first)")
        check_model_dir(resolved.directory)
        if model_name is None and resolved.kind in ("hub", "preset"):
            model_name = checkpoint  # the name a client asks for, not the snapshot's or cache folder's name
        run_server(str(resolved.directory), host, port, model_name, limits, threads, placed)
