"""What one request may cost the server: body size, prompt length, completion length, and a bounded queue.

A policy-facing server meets hostile input. Every limit refuses as early as it can: the body size from
``Content-Length`` before reading and again while reading (before any JSON parsing); the prompt length from
its characters before tokenizing (a token covers at most ``chars_per_token`` characters, so more than
``max_prompt_tokens * chars_per_token`` characters cannot fit); then from its tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pydantic import BaseModel, ConfigDict, Field

from polyrl.serve.api_errors import ServeError, error_response


class ServeLimits(BaseModel):
    """Limits of `polyrl serve` (each is a `polyrl serve` option)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_request_bytes: int = Field(1_048_576, ge=1024, description="Largest request body (bytes); larger: 413.")
    max_messages: int = Field(256, ge=1, description="Most messages in one request; more: 400.")
    max_prompt_tokens: int | None = Field(
        None, ge=1, description="Longest prompt in tokens (default: the model's context minus one); longer: 400."
    )
    default_max_tokens: int = Field(256, ge=1, description="Completion tokens when a request does not say.")
    max_tokens: int = Field(1024, ge=1, description="Cap on a request's max_tokens (larger requests are cut to it).")
    max_waiting: int = Field(16, ge=0, description="Requests that may wait behind the running one; more: 503.")
    retry_after_s: int = Field(1, ge=1, description="Retry-After (seconds) sent with a 503.")
    max_connections: int = Field(64, ge=1, description="Open connections at once; one more is closed with a 503.")
    header_timeout_s: float = Field(
        10.0, gt=0, description="Seconds a client has to send a request's headers; then 408 and closed."
    )
    idle_timeout_s: float = Field(
        10.0, gt=0, description="Seconds a connection may send nothing mid-body or between requests; then closed."
    )


def chars_per_token(tokenizer) -> int:
    """The most characters of text one token can cover: the longest vocabulary entry (special tokens included).

    Byte-level BPE spells each byte of a token with one character, SentencePiece each character with one,
    so a text of ``c`` characters has at least ``c / chars_per_token`` tokens.
    """
    return max(len(token) for token in tokenizer.get_vocab())


def refuse_long_prompt(size: str, limit: int, context: int | None) -> ServeError:
    """A 400 with OpenAI's ``context_length_exceeded`` code; ``size`` says how long the prompt is."""
    if context is not None and limit == context - 1:
        reason = f"this model's context is {context}"
    else:
        reason = "polyrl serve --max-prompt-tokens"
    return ServeError(
        400,
        f"the prompt has {size}; at most {limit} tokens fit ({reason})",
        param="messages",
        code="context_length_exceeded",
    )


def check_prompt_chars(chars: int, limit: int, per_token: int, context: int | None) -> None:
    """Refuse, before tokenizing, a prompt whose ``chars`` characters cannot fit in ``limit`` tokens."""
    if chars > limit * per_token:
        size = f"{chars} characters, so more than {chars // per_token} tokens (one covers at most {per_token})"
        raise refuse_long_prompt(size, limit, context)


class BodySizeLimit:
    """ASGI middleware: a body over ``max_bytes`` gets a 413 before the app (and its JSON parser) sees it.

    Checked from ``Content-Length`` before reading, then while reading (a chunked upload or a wrong
    ``Content-Length``); the body is read here and handed on whole.
    """

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send) -> None:
        message = f"the request body is larger than {self.max_bytes} bytes (polyrl serve --max-request-bytes)"
        response = error_response(413, message, code="request_too_large", headers={"Connection": "close"})
        await response(scope, receive, send)


class Admission:
    """One generation at a time (the model is shared), first come first served, and at most ``max_waiting``
    requests waiting behind it; one more is refused with 503 and ``Retry-After`` instead of queueing without
    bound. Used from the event loop only, so the counter needs no lock."""

    def __init__(self, max_waiting: int, retry_after_s: int):
        self.max_waiting, self.retry_after_s = max_waiting, retry_after_s
        self.admitted = 0  # running + waiting
        self._turn = asyncio.Lock()  # FIFO

    @property
    def waiting(self) -> int:
        return max(0, self.admitted - 1)

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        if self.admitted > self.max_waiting:
            raise ServeError(
                503,
                f"the server is busy ({self.max_waiting} requests already waiting); retry in {self.retry_after_s} s",
                code="queue_full",
                headers={"Retry-After": str(self.retry_after_s)},
            )
        self.admitted += 1
        try:
            async with self._turn:
                yield
        finally:
            self.admitted -= 1
