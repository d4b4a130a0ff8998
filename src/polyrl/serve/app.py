"""An OpenAI-compatible chat-completions server for a checkpoint (FastAPI).

Endpoints: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``. Every error is in OpenAI's
shape (:mod:`polyrl.serve.api_errors`); what a request may cost is bounded by :class:`~polyrl.serve.limits.ServeLimits`.

A vision-language policy (the tiny VLM, a Hugging Face VLM) also takes pictures, as OpenAI's ``image_url`` content
parts with data URIs (:mod:`polyrl.serve.pictures`); a text-only one refuses them.

One generation runs at a time (the model is shared and ``generate`` is not made for concurrent calls), in a
worker thread so the event loop keeps answering; the ``n`` completions of one request are one batch.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from fastapi import FastAPI, Request  # at module level: FastAPI resolves the handlers' annotations here
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from polyrl.device import HOST
from polyrl.errors import UserError
from polyrl.policy.generation import TransformersBackend
from polyrl.policy.model_files import model_positions
from polyrl.serve.api_errors import ServeError, install_handlers
from polyrl.serve.completion import add_logprobs, completion_events, completion_object, make_choice
from polyrl.serve.limits import (
    Admission,
    BodySizeLimit,
    ServeLimits,
    chars_per_token,
    check_prompt_chars,
    refuse_long_prompt,
)
from polyrl.serve.pictures import check_pictures, codec_of, decoded_messages, picture_limit, vlm_prompt_ids
from polyrl.serve.schema import ChatMessage, ChatRequest, sampling


def prompt_ids(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """The prompt through the tokenizer's chat template (plain concatenation when it has none).

    A template that refuses the messages (many raise on roles that do not alternate) makes this a 400.
    """
    if getattr(tokenizer, "chat_template", None):
        from jinja2 import TemplateError

        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except TemplateError as exc:
            raise ServeError(400, f"the model's chat template refused the messages: {exc}", param="messages") from None
        return tokenizer(text, add_special_tokens=False).input_ids
    return tokenizer("\n".join(m["content"] for m in messages) + "\n").input_ids


class ServedPrompts:
    """How the served policy's prompts are rendered: a text-only policy's through its tokenizer's chat template
    (:func:`prompt_ids`), a vision-language policy's through the chat codec training renders episodes with, with
    its pictures (:mod:`polyrl.serve.pictures`)."""

    def __init__(self, tokenizer, image_input, max_prompt: int | None):
        self.tokenizer, self.image_input = tokenizer, image_input
        self.codec = codec_of(tokenizer, image_input) if image_input is not None else None
        self.max_pictures = picture_limit(image_input, max_prompt)

    def check(self, messages: list[ChatMessage]) -> None:
        """Refuse the request's pictures that cannot be served, before decoding any."""
        check_pictures(messages, self.image_input, self.max_pictures)

    def ids(self, messages: list[ChatMessage]) -> list[int]:
        """The prompt's ids (an ``ImageIds`` carrying its pictures when it shows any)."""
        if self.codec is None:
            return prompt_ids(self.tokenizer, [{"role": m.role, "content": m.text()} for m in messages])
        return vlm_prompt_ids(self.codec, decoded_messages(messages))


def build_app(policy, model_name: str, limits: ServeLimits | None = None):
    """The FastAPI app serving ``policy`` (a :class:`~polyrl.policy.loading.Policy`) as ``model_name``."""
    limits = limits or ServeLimits()
    tokenizer = policy.tokenizer
    backend = TransformersBackend(policy.model, tokenizer, device=policy.device)
    context = model_positions(policy.model)  # a vision-language model's: its language model's
    max_prompt = limits.max_prompt_tokens or (context - 1 if context else None)
    if max_prompt is not None and context is not None and max_prompt >= context:
        raise UserError(
            f"--max-prompt-tokens {max_prompt} leaves no room to generate: the model's context is {context}"
        )
    per_token = chars_per_token(tokenizer)
    prompts = ServedPrompts(tokenizer, getattr(policy, "image_input", None), max_prompt)
    admission = Admission(limits.max_waiting, limits.retry_after_s)
    created = int(time.time())
    app = FastAPI(title=f"polyrl serve: {model_name}")
    app.add_middleware(BodySizeLimit, max_bytes=limits.max_request_bytes)
    install_handlers(app)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "waiting": admission.waiting}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "created": created, "owned_by": "polyrl"}],
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(request: ChatRequest, http: Request):
        refused = request.unsupported()
        if refused is not None:
            raise ServeError(400, refused[1], param=refused[0])
        if len(request.messages) > limits.max_messages:
            raise ServeError(
                400, f"{len(request.messages)} messages; at most {limits.max_messages} fit", param="messages"
            )
        prompts.check(request.messages)
        if max_prompt is not None:
            chars = sum(len(m.text()) for m in request.messages)
            check_prompt_chars(chars, max_prompt, per_token, context)
        ids = await run_in_threadpool(prompts.ids, request.messages)
        if max_prompt is not None and len(ids) > max_prompt:
            raise refuse_long_prompt(f"{len(ids)} tokens", max_prompt, context)
        asked = request.max_completion_tokens or request.max_tokens or limits.default_max_tokens
        max_tokens = min(asked, limits.max_tokens)
        if context is not None:
            max_tokens = min(max_tokens, context - len(ids))  # like vLLM: cut the budget to what fits
        how = sampling(request.temperature, request.top_p)
        async with admission.turn():
            if await http.is_disconnected():  # gave up while waiting: generating for nobody would delay the rest
                raise ServeError(499, "the client disconnected while its request waited")
            choices = await run_in_threadpool(complete, request, ids, max_tokens, how)
        if request.stream:
            include_usage = request.stream_options is not None and request.stream_options.include_usage
            events = completion_events(model_name, len(ids), choices, include_usage)
            return StreamingResponse(events, media_type="text/event-stream")
        return completion_object(model_name, len(ids), choices)

    def complete(request: ChatRequest, ids: list[int], max_tokens: int, how):
        """The request's choices: generated (from its ``seed`` when it gives one), cut at ``stop``, with logprobs."""
        with torch.random.fork_rng(devices=[]):  # a seed fixes this request's sampling only
            if request.seed is not None:
                torch.manual_seed(request.seed)
            gens = backend.generate(
                [ids] * request.n,
                max_new_tokens=max_tokens,
                temperature=how.temperature,
                top_p=how.top_p,
                greedy=how.greedy,
            )
        choices = [make_choice(tokenizer, g, request.stop) for g in gens]
        if request.logprobs:
            add_logprobs(policy.model, policy.device, tokenizer, ids, choices, request.top_logprobs or 0)
        return choices

    return app


def serve(
    checkpoint: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    model_name: str | None = None,
    limits: ServeLimits | None = None,
    threads: int | None = None,
    device=HOST,
) -> None:
    """Load ``checkpoint`` on ``device`` and serve it until interrupted, generating with ``threads`` torch CPU
    threads (default: :func:`~polyrl.policy.threads.default_threads`; torch's one per core collapses on a busy
    machine)."""
    from pathlib import Path

    import uvicorn

    from polyrl.policy.loading import ModelConfig, load_policy
    from polyrl.policy.threads import available_cores, default_threads

    torch.set_num_threads(threads or default_threads(available_cores()))
    policy = load_policy(ModelConfig(path=checkpoint), device=device)
    name = model_name or Path(checkpoint).resolve().name
    limits = limits or ServeLimits()
    uvicorn.Server(server_config(build_app(policy, name, limits), limits, host, port, "info")).run()


def server_config(app, limits: ServeLimits, host: str, port: int, log_level: str = "warning"):
    """uvicorn's config for ``app``: HTTP/1.1 with the connection cap and the header and idle timeouts."""
    import uvicorn

    from polyrl.serve.connections import guarded_protocol

    protocol = guarded_protocol(limits.max_connections, limits.header_timeout_s, limits.idle_timeout_s)
    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level, http=protocol, timeout_keep_alive=limits.idle_timeout_s
    )
