"""An OpenAI-compatible chat-completions server for a checkpoint (FastAPI).

Endpoints: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``. Errors use OpenAI's shape
``{"error": {"message", "type", "param", "code"}}``: 400 for requests the model cannot serve (prompt longer
than its context), 422 for requests that do not match the schema.

One generation runs at a time (a lock): the model is shared and ``generate`` is not made for concurrent
calls. ``n`` completions of one request are generated as one batch.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from polyrl.policy.generation import TransformersBackend


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(BaseModel):
    """The subset of OpenAI's chat-completions request the server honours; other fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=64)


def _error(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None):
    from fastapi.responses import JSONResponse

    return JSONResponse(
        status_code=status, content={"error": {"message": message, "type": kind, "param": param, "code": None}}
    )


def prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """The prompt through the tokenizer's chat template (plain concatenation when it has none)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False).input_ids
    return tokenizer("\n".join(m["content"] for m in messages) + "\n").input_ids


def build_app(policy, model_name: str, default_max_tokens: int = 256):
    """The FastAPI app serving ``policy`` (a :class:`~polyrl.policy.loading.Policy`) as ``model_name``."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError

    backend = TransformersBackend(policy.model, policy.tokenizer)
    context = getattr(policy.model.config, "max_position_embeddings", None)
    lock = threading.Lock()
    created = int(time.time())
    app = FastAPI(title=f"polyrl serve: {model_name}")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError):
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"] if p != "body")
        return _error(422, f"{where}: {err['msg']}" if where else err["msg"], param=where or None)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "model": model_name}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "created": created, "owned_by": "polyrl"}],
        }

    @app.post("/v1/chat/completions")
    def chat_completions(request: ChatRequest):
        ids = prompt_ids(policy.tokenizer, [m.model_dump() for m in request.messages])
        max_tokens = request.max_completion_tokens or request.max_tokens or default_max_tokens
        if context is not None:
            if len(ids) >= context:
                return _error(
                    400, f"the prompt has {len(ids)} tokens; this model's context is {context}", param="messages"
                )
            max_tokens = min(max_tokens, context - len(ids))  # like vLLM: cut the budget to what fits
        greedy = request.temperature == 0.0
        with lock:
            gens = backend.generate(
                [ids] * request.n,
                max_new_tokens=max_tokens,
                temperature=request.temperature or 1.0,
                top_p=request.top_p,
                greedy=greedy,
            )
        completion_tokens = sum(len(g.completion_ids) for g in gens)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": g.text},
                    "finish_reason": "stop" if g.finished else "length",
                    "logprobs": None,
                }
                for i, g in enumerate(gens)
            ],
            "usage": {
                "prompt_tokens": len(ids),
                "completion_tokens": completion_tokens,
                "total_tokens": len(ids) + completion_tokens,
            },
        }

    return app


def serve(checkpoint: str, host: str = "127.0.0.1", port: int = 8000, model_name: str | None = None) -> None:
    """Load ``checkpoint`` and serve it until interrupted."""
    from pathlib import Path

    import uvicorn

    from polyrl.policy.loading import ModelConfig, load_policy

    policy = load_policy(ModelConfig(path=checkpoint))
    name = model_name or Path(checkpoint).resolve().name
    uvicorn.run(build_app(policy, name), host=host, port=port, log_level="info")
