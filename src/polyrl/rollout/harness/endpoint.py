"""The local OpenAI-compatible endpoint agents talk to during a harness rollout.

``POST http://127.0.0.1:<port>/<key>/v1/chat/completions``: every episode has its own base URL, whose
``key`` is random (``secrets.token_urlsafe``), so that an agent can neither guess nor post to a sibling
episode's; an unknown key is a 404. Handler threads only place a request on its episode's token ledger and
wait; the thread that runs the rollout generates, batching every request that is waiting into one
``generate`` call as soon as each running agent has one waiting, or when no new request has come for
``batch_wait_s`` (at most 10 × ``batch_wait_s`` after the first), so concurrent agents share the policy's
batch as environment episodes do.

A request is refused (OpenAI's error shape, :mod:`polyrl.serve.api_errors`) before it can cost more than the
model can use: over ``max_messages`` messages, or more characters than the model's positions can hold, is a
400 before tokenizing; a prompt of more tokens than the positions (less one to generate) is a 400
``context_length_exceeded``, as is a request once the episode's completions and environment tokens have
spent ``env.max_episode_tokens`` (over all its sequences); a completion is cut to what fits in both.
The HTTP limits are :mod:`polyrl.rollout.harness.http`'s.
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from polyrl.policy.generation import Generation, GenerationBackend
from polyrl.policy.model_files import model_positions
from polyrl.rollout.chat import ChatCodec
from polyrl.rollout.harness.http import MODEL_NAME, HarnessServer, handler
from polyrl.rollout.harness.ledger import EpisodeLedger, Turn
from polyrl.rollout.harness.openai_chat import (
    HarnessRequest,
    assistant_message,
    completion_body,
    misplaced_tool_message,
    text_of,
)
from polyrl.rollout.harness.recorded_logprobs import response_logprobs, token_logprobs_content
from polyrl.serve.api_errors import ServeError, error_body, validation_message
from polyrl.serve.limits import ServeLimits, chars_per_token, check_prompt_chars, refuse_long_prompt

_chars_per_token = functools.lru_cache(maxsize=8)(chars_per_token)  # a vocabulary scan, once per tokenizer

MAX_WAIT_FACTOR = 10
"""The oldest waiting request waits at most this many ``batch_wait_s`` for others to join its batch."""


@dataclass
class EpisodeState:
    ledger: EpisodeLedger
    key: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    """The episode's part of its base URL: 128 random bits."""
    open: bool = True
    """False once the episode ended (returned, raised, timed out): later requests are refused."""
    end_reason: str | None = None
    """Why the endpoint ended it (``token_budget``, ``context_length``), if it did."""
    requests: int = 0
    models_named: set[str] = field(default_factory=set)
    """Models other than the endpoint's own its requests named (the policy answered them all the same)."""

    @property
    def spent(self) -> int:
        """Tokens the episode's sequences hold beyond their first prompts (completions and environment turns)."""
        return sum(len(s.response_ids) for s in self.ledger.segments)


@dataclass
class Waiting:
    episode: EpisodeState
    turn: Turn
    max_new_tokens: int
    logprobs: bool = False
    since: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    body: dict | None = None
    error: tuple[int, str] | None = None


def backend_positions(backend: GenerationBackend) -> int | None:
    """The longest prompt + completion the backend's model takes (None when it does not say)."""
    model = getattr(backend, "model", None)
    if getattr(model, "config", None) is not None:
        return model_positions(model)
    engine = getattr(getattr(backend, "llm", None), "llm_engine", None)  # vLLM
    return getattr(getattr(engine, "model_config", None), "max_model_len", None)


class HarnessEndpoint:
    def __init__(
        self,
        codec: ChatCodec,
        backend: GenerationBackend,
        sampling: dict[str, Any],
        max_new_tokens: int,
        max_episode_tokens: int,
        batch_wait_s: float,
        limits: ServeLimits | None = None,
        positions: int | None = None,
    ):
        self.codec, self.backend, self.sampling = codec, backend, sampling
        self.max_new_tokens, self.max_episode_tokens, self.batch_wait_s = (
            max_new_tokens,
            max_episode_tokens,
            batch_wait_s,
        )
        self.limits = limits or ServeLimits()
        self.positions = positions or backend_positions(backend)
        self.chars_per_token = _chars_per_token(codec.tok) if self.positions else 0
        self.tool_format, self.response_template = codec.resolve("auto")
        self.episodes: dict[str, EpisodeState] = {}
        self.waiting: list[Waiting] = []
        self.cond = threading.Condition()
        self.server = HarnessServer(("127.0.0.1", 0), handler(self, self.limits))
        self._thread = threading.Thread(  # polled often: close() waits for the next poll, once per rollout
            target=self.server.serve_forever, args=(0.05,), name="polyrl-harness", daemon=True
        )
        self._thread.start()

    def base_url(self, state: EpisodeState) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/{state.key}/v1"

    def add_episode(self) -> EpisodeState:
        state = EpisodeState(EpisodeLedger(self.codec))
        self.episodes[state.key] = state
        return state

    def end_episode(self, state: EpisodeState, reason: str | None = None) -> None:
        """Refuse the episode's further requests and answer its waiting one with an error."""
        with self.cond:
            state.open = False
            state.end_reason = state.end_reason or reason
            for w in [w for w in self.waiting if w.episode is state]:
                self.waiting.remove(w)
                self._refuse(w, 409, f"episode ended ({state.end_reason or 'finished'})")
            self.cond.notify_all()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- handler side -------------------------------------------------------------------------------
    def complete(self, key: str, payload: Any) -> tuple[int, dict]:
        """Answer one request (called on a handler thread): the completion, or ``(status, error)``."""
        state = self.episodes.get(key)
        if state is None:
            return 404, error_body(404, "unknown episode: use the base URL the episode was given", code="unknown_url")
        try:
            request, messages = self._read(payload)
            with self.cond:
                waiting = self._admit(state, request, messages)
        except ServeError as exc:
            return exc.status, error_body(exc.status, exc.message, exc.param, exc.code)
        waiting.done.wait()
        if waiting.error is not None:
            return waiting.error[0], error_body(*waiting.error)
        return 200, waiting.body

    def _read(self, payload: Any) -> tuple[HarnessRequest, list[dict[str, Any]]]:
        """The request and its messages, checked: the count (before parsing them), each message, and the order
        of tool results."""
        messages = payload.get("messages") if isinstance(payload, dict) else None
        if isinstance(messages, list) and len(messages) > self.limits.max_messages:
            raise ServeError(
                400, f"{len(messages)} messages; at most {self.limits.max_messages} fit", param="messages"
            )
        try:
            request = HarnessRequest.model_validate(payload)
        except ValidationError as exc:
            message, where = validation_message([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()])
            raise ServeError(400, message, param=where) from None
        misplaced = misplaced_tool_message(messages)
        if misplaced is not None:
            raise ServeError(
                400,
                f"messages.{misplaced}: a tool message must follow an assistant message with tool_calls",
                param=f"messages.{misplaced}",
            )
        return request, messages

    def _admit(self, state: EpisodeState, request: HarnessRequest, messages: list[dict[str, Any]]) -> Waiting:
        """Place the request on the episode's ledger and queue it for generation (under ``self.cond``), unless
        it is too long for the model's positions or the episode's token budget."""
        if not state.open:
            raise ServeError(409, f"episode ended ({state.end_reason or 'finished'})")
        if self.positions:  # more characters than the positions can hold: refused before tokenizing
            chars = sum(len(text_of(m.get("content"))) for m in messages)
            try:
                check_prompt_chars(chars, self.positions - 1, self.chars_per_token, self.positions)
            except ServeError:
                state.end_reason = state.end_reason or "context_length"
                raise
        try:
            turn = state.ledger.place(messages, request.tools)
        except Exception as exc:  # a message the chat template cannot render is the client's error
            raise ServeError(400, f"cannot render the messages with the chat template: {exc}") from None
        fits = self.positions - len(turn.prompt) if self.positions else self.max_new_tokens
        room = self.max_episode_tokens - state.spent - len(turn.env_ids)
        if fits <= 0 or room <= 0:
            state.ledger.release(turn)
            if fits <= 0:
                state.end_reason = state.end_reason or "context_length"
                raise refuse_long_prompt(f"{len(turn.prompt)} tokens", self.positions - 1, self.positions)
            state.end_reason = state.end_reason or "token_budget"
            raise ServeError(
                400, "the episode's token budget (env.max_episode_tokens) is spent", code="context_length_exceeded"
            )
        state.requests += 1
        if request.model is not None and request.model != MODEL_NAME:
            state.models_named.add(request.model[:100])
        limit = min(self.max_new_tokens, room, fits, request.token_limit or self.max_new_tokens)
        waiting = Waiting(state, turn, limit, request.logprobs)
        self.waiting.append(waiting)
        self.cond.notify_all()
        return waiting

    # -- generation side ----------------------------------------------------------------------------
    def serve_once(self, running: int, timeout: float) -> None:
        """Generate for the waiting requests once all ``running`` agents have one waiting, or no request has
        arrived for ``batch_wait_s``; returns after ``timeout`` seconds when none is waiting."""
        with self.cond:
            end = time.monotonic() + timeout
            while True:
                now = time.monotonic()
                if self.waiting:  # requests still arriving (agents starting, tools returning) join the batch
                    gap_end = self.waiting[-1].since + self.batch_wait_s
                    flush_at = min(gap_end, self.waiting[0].since + MAX_WAIT_FACTOR * self.batch_wait_s)
                    if len(self.waiting) >= running or now >= flush_at:
                        batch, self.waiting = self.waiting, []
                        break
                    self.cond.wait(min(flush_at, end) - now)
                elif now >= end:
                    return
                else:
                    self.cond.wait(end - now)
        self._generate(batch)

    def _generate(self, batch: list[Waiting]) -> None:
        """One ``generate`` call for the batch, at its largest token limit; a request with a smaller one keeps
        the first tokens of its completion (the same distribution as sampling with its own limit)."""
        gens = self.backend.generate(
            [w.turn.prompt for w in batch], max_new_tokens=max(w.max_new_tokens for w in batch), **self.sampling
        )
        cut = [_truncated(g, w.max_new_tokens, self.codec.tok) for w, g in zip(batch, gens)]
        scored = self._logprobs([(w.turn.prompt, g.completion_ids) for w, g in zip(batch, cut) if w.logprobs])
        with self.cond:
            for w, gen in zip(batch, cut):
                if not w.episode.open:
                    self._refuse(w, 409, "episode ended")
                    continue
                reply, malformed = assistant_message(
                    self.codec.action_text(gen.completion_ids, gen.text),
                    self.tool_format,
                    self.response_template,
                    len(w.turn.segment.turn_spans),
                )
                w.episode.ledger.record(w.turn, gen.completion_ids, gen.text, gen.finished, reply, malformed)
                content = None
                if w.logprobs and scored is not None:
                    content = token_logprobs_content(self.codec.tok, gen.completion_ids, scored.pop(0))
                w.body = completion_body(
                    reply, gen.finished, len(w.turn.prompt), len(gen.completion_ids), MODEL_NAME, content
                )
                w.done.set()

    def _logprobs(self, rows: list[tuple[list[int], list[int]]]) -> list[list[float]] | None:
        """Behaviour log-probs of these completions (None for a backend without an in-process model)."""
        model = getattr(self.backend, "model", None)
        if not rows or model is None:
            return None
        temperature = 1.0 if self.sampling.get("greedy") else self.sampling.get("temperature", 1.0)
        return response_logprobs(model, self.backend.device, rows, self.codec.tok.pad_token_id or 0, temperature)

    def _refuse(self, w: Waiting, status: int, message: str) -> None:
        w.episode.ledger.release(w.turn)
        w.error = (status, message)
        w.done.set()


def _truncated(gen: Generation, limit: int, tok) -> Generation:
    if len(gen.completion_ids) <= limit:
        return gen
    ids = gen.completion_ids[:limit]
    return Generation(gen.prompt_ids, ids, tok.decode(ids, skip_special_tokens=True), False)
