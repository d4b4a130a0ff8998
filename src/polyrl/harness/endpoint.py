"""The local OpenAI-compatible endpoint agents talk to during a harness rollout.

``POST http://127.0.0.1:<port>/<episode>/v1/chat/completions``: every episode has its own base URL, so
its requests land on its own token ledger. Handler threads only place a request on the ledger and wait;
the thread that runs the rollout generates, batching every request that is waiting into one ``generate``
call as soon as each running agent has one waiting, or when no new request has come for ``batch_wait_s``
(at most 10 × ``batch_wait_s`` after the first), so concurrent agents share the policy's batch as
environment episodes do.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import ValidationError

from polyrl.harness.chat import HarnessRequest, assistant_message, completion_body, stream_chunks
from polyrl.harness.ledger import EpisodeLedger, Turn
from polyrl.harness.logprobs import response_logprobs, token_logprobs_content
from polyrl.policy.generation import Generation, GenerationBackend
from polyrl.rollout.chat import ChatCodec

MODEL_NAME = "polyrl-policy"
MAX_WAIT_FACTOR = 10
"""The oldest waiting request waits at most this many ``batch_wait_s`` for others to join its batch."""


@dataclass
class EpisodeState:
    ledger: EpisodeLedger
    open: bool = True
    """False once the episode ended (returned, raised, timed out): later requests are refused."""
    end_reason: str | None = None
    """Why the endpoint ended it (``token_budget``), if it did."""
    requests: int = 0


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


class HarnessEndpoint:
    def __init__(
        self,
        codec: ChatCodec,
        backend: GenerationBackend,
        sampling: dict[str, Any],
        max_new_tokens: int,
        max_episode_tokens: int,
        batch_wait_s: float,
    ):
        self.codec, self.backend, self.sampling = codec, backend, sampling
        self.max_new_tokens, self.max_episode_tokens, self.batch_wait_s = (
            max_new_tokens,
            max_episode_tokens,
            batch_wait_s,
        )
        self.tool_format, self.response_template = codec.resolve("auto")
        self.episodes: dict[str, EpisodeState] = {}
        self.waiting: list[Waiting] = []
        self.cond = threading.Condition()
        self.server = _Server(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="polyrl-harness", daemon=True)
        self._thread.start()

    def base_url(self, episode: str) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/{episode}/v1"

    def add_episode(self, name: str) -> EpisodeState:
        self.episodes[name] = state = EpisodeState(EpisodeLedger(self.codec))
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
    def complete(self, episode: str, payload: Any) -> tuple[int, dict]:
        """Answer one request (called on a handler thread): the completion, or ``(status, error)``."""
        state = self.episodes.get(episode)
        if state is None:
            return 404, _error(f"unknown episode {episode!r}")
        try:
            request = HarnessRequest.model_validate(payload)
        except ValidationError as exc:
            return 400, _error(f"invalid request: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}")
        with self.cond:
            if not state.open:
                return 409, _error(f"episode ended ({state.end_reason or 'finished'})")
            try:
                turn = state.ledger.place(request.messages, request.tools)
            except Exception as exc:  # a message the chat template cannot render is the client's error
                return 400, _error(f"cannot render the messages with the chat template: {exc}")
            room = self.max_episode_tokens - len(turn.segment.response_ids) - len(turn.env_ids)
            if room <= 0:
                state.ledger.release(turn)
                state.end_reason = state.end_reason or "token_budget"
                return 400, _error(
                    "the episode's token budget (env.max_episode_tokens) is spent", "context_length_exceeded"
                )
            state.requests += 1
            limit = min(self.max_new_tokens, room, request.token_limit or self.max_new_tokens)
            waiting = Waiting(state, turn, limit, request.logprobs)
            self.waiting.append(waiting)
            self.cond.notify_all()
        waiting.done.wait()
        if waiting.error is not None:
            return waiting.error[0], _error(waiting.error[1])
        return 200, waiting.body

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
        return response_logprobs(model, rows, self.codec.tok.pad_token_id or 0, temperature)

    def _refuse(self, w: Waiting, status: int, message: str) -> None:
        w.episode.ledger.release(w.turn)
        w.error = (status, message)
        w.done.set()


def _truncated(gen: Generation, limit: int, tok) -> Generation:
    if len(gen.completion_ids) <= limit:
        return gen
    ids = gen.completion_ids[:limit]
    return Generation(gen.prompt_ids, ids, tok.decode(ids, skip_special_tokens=True), False)


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # every agent of a step may connect at once (socketserver's default is 5)


def _error(message: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}


def _handler(endpoint: HarnessEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # no access log on the trainer's terminal
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, body: dict) -> None:
            data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in stream_chunks(body)) + b"data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            parts = self.path.strip("/").split("/")
            if parts[1:] == ["v1", "models"]:
                self._send(
                    200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "polyrl"}]}
                )
            else:
                self._send(404, _error(f"no route {self.path}"))

        def do_POST(self):
            parts = self.path.split("?")[0].strip("/").split("/")
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if parts[1:] != ["v1", "chat", "completions"]:
                self._send(404, _error(f"no route {self.path}"))
                return
            try:
                payload = json.loads(raw)
            except ValueError:
                self._send(400, _error("request body is not JSON"))
                return
            status, body = endpoint.complete(parts[0], payload)
            if status == 200 and isinstance(payload, dict) and payload.get("stream"):
                self._stream(body)
            else:
                self._send(status, body)

    return Handler
