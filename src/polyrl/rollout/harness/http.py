"""The harness endpoint's HTTP side: routes, and what one request may cost before the endpoint reads it.

Agent code is the endpoint's only client, and it may be faulty or hostile, so a request is bounded as
`polyrl serve` bounds one (:class:`polyrl.serve.limits.ServeLimits`, errors in OpenAI's shape): a body must
say its ``Content-Length`` (411 without it, 400 when it is not a number, 413 over ``max_request_bytes`` —
all before a byte of it is read), must arrive without a pause longer than ``idle_timeout_s`` (408), and
must be JSON nested at most :data:`MAX_JSON_DEPTH` deep (400, checked in linear time before parsing).
Every refusal before the body is read closes the connection, since the unread bytes would otherwise be
taken for the next request.
"""

from __future__ import annotations

import json
import re
import sys
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import accumulate
from typing import Any, Protocol

from polyrl.rollout.harness.openai_chat import stream_chunks
from polyrl.serve.api_errors import ServeError, error_body
from polyrl.serve.limits import ServeLimits


class Endpoint(Protocol):
    """What the server asks of the harness endpoint (``polyrl.rollout.harness.endpoint.HarnessEndpoint``)."""

    episodes: dict

    def complete(self, key: str, payload: Any) -> tuple[int, dict]: ...


MODEL_NAME = "polyrl-policy"
MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects a request body may have (tool schemas nest a dozen levels)."""

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"?', re.S)  # possessive, closing quote optional: linear on any input
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(raw: bytes) -> int:
    """How deeply arrays and objects nest in ``raw`` (brackets inside strings do not count), in linear time."""
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def parse_body(raw: bytes) -> Any:
    """The JSON request body; a ServeError (400) when it is not JSON or nests too deeply to parse safely."""
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise ServeError(400, f"the request body nests arrays and objects more than {MAX_JSON_DEPTH} deep")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ServeError(400, f"the request body is not valid JSON ({exc})") from None


class HarnessServer(ThreadingHTTPServer):
    request_queue_size = 1024  # every agent of a step may connect at once (socketserver's default is 5)
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client that reset or dropped its connection mid-request (an agent killed or timed out, a client
        library giving up) is one warning line, not socketserver's traceback on the trainer's stderr (issue #43);
        the run goes on. Any other error is a bug, and keeps its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):  # reset, broken pipe, aborted
            warnings.warn(
                f"a client of the harness endpoint dropped its connection mid-request ({type(error).__name__}); "
                "nothing was answered on it",
                stacklevel=1,
            )
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """One connection to the harness endpoint; :func:`handler` makes the class of one endpoint's server."""

    endpoint: Endpoint
    limits: ServeLimits
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # no access log on the trainer's terminal
        pass

    def parse_request(self) -> bool:
        try:
            return super().parse_request()
        except TimeoutError:  # the request line came, its headers did not
            self._refuse(408, "the request headers did not arrive in time")
            return False

    def _send(self, status: int, body: dict, close: bool = False) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self, status: int, message: str, code: str | None = None) -> None:
        """An error answer that also closes the connection (what is left of the request is not read)."""
        self._send(status, error_body(status, message, code=code), close=True)

    def _stream(self, body: dict) -> None:
        data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in stream_chunks(body)) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> tuple[str, list[str]]:
        """``(episode key, the rest of the path)``."""
        parts = self.path.split("?")[0].strip("/").split("/")
        return parts[0], parts[1:]

    def do_GET(self):
        key, rest = self._route()
        if rest == ["v1", "models"] and key in self.endpoint.episodes:
            self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model", "owned_by": "polyrl"}]})
        else:
            self._send(404, error_body(404, f"no route {self.path}", code="unknown_url"))

    def _body(self) -> bytes | None:
        """The request body, or None once a refusal has been sent."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower() or "Content-Length" not in self.headers:
            self._refuse(411, "send the request body with a Content-Length (chunked bodies are not read)")
            return None
        declared = self.headers["Content-Length"].strip()
        if not declared.isdigit():
            self._refuse(400, f"Content-Length must be a number of bytes, not {declared[:20]!r}")
            return None
        if int(declared) > self.limits.max_request_bytes:
            self._refuse(
                413, f"the request body is larger than {self.limits.max_request_bytes} bytes", "request_too_large"
            )
            return None
        try:
            raw = self.rfile.read(int(declared))
        except TimeoutError:
            self._refuse(408, f"the request body stopped arriving for {self.limits.idle_timeout_s:g} s")
            return None
        if len(raw) < int(declared):  # the client closed the connection mid-body: nobody to answer
            self.close_connection = True
            return None
        return raw

    def do_POST(self):
        raw = self._body()
        if raw is None:
            return
        key, rest = self._route()
        if rest != ["v1", "chat", "completions"]:
            self._send(404, error_body(404, f"no route {self.path}", code="unknown_url"))
            return
        try:
            payload = parse_body(raw)
        except ServeError as exc:
            self._send(exc.status, error_body(exc.status, exc.message))
            return
        status, body = self.endpoint.complete(key, payload)
        if status == 200 and isinstance(payload, dict) and payload.get("stream"):
            self._stream(body)
        else:
            self._send(status, body)


def handler(endpoint: Endpoint, limits: ServeLimits) -> type[BaseHTTPRequestHandler]:
    """The request handler class of ``endpoint``'s server (each read of a connection, headers and body alike,
    times out after ``limits.idle_timeout_s``)."""
    return type("Handler", (_Handler,), {"endpoint": endpoint, "limits": limits, "timeout": limits.idle_timeout_s})
