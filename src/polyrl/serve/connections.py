"""What one connection may hold: a cap on open connections, and timeouts for clients that send too slowly.

uvicorn bounds neither a request's headers in time nor the number of connections (``limit_concurrency``
answers 503 only once a request's headers have arrived), so 1,500 clients that never finish their headers
held 1,500 file descriptors until ``/health`` itself timed out (issue #25). :class:`GuardedH11Protocol`,
uvicorn's HTTP/1.1 protocol with three guards, closes:

* a connection over ``max_connections`` as soon as it is accepted (with a ``503``);
* a connection whose request headers are not complete ``header_timeout_s`` after it opened, or after its
  previous response (with a ``408``);
* a connection that sends nothing for ``idle_timeout_s`` while its request body is incomplete (``408``), or
  between requests (uvicorn's keep-alive timeout, set to the same value).

The file descriptors the server holds are then bounded by ``max_connections``, and each for bounded time.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

_REFUSALS = {
    503: b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\nRetry-After: 1\r\n\r\n",
    408: b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
}


class GuardedH11Protocol(H11Protocol):
    """uvicorn's H11Protocol with a connection cap, a header timeout and a body idle timeout."""

    max_connections = 64
    header_timeout_s = 10.0
    idle_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        if len(self.connections) > self.max_connections:
            self._refuse(503)
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        """The deadline that applies now: the headers' (from the first byte awaited), the body's (from the last
        byte received), or none while the request is being answered."""
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.IDLE and self.conn.our_state is h11.IDLE:
            if self._deadline is None:  # headers: counted from when they were first awaited, not reset by bytes
                self._deadline = self.loop.call_later(self.header_timeout_s, self._refuse, 408)
        elif state is h11.SEND_BODY:
            self._disarm()  # a body: counted from the last byte received
            self._deadline = self.loop.call_later(self.idle_timeout_s, self._refuse, 408)
        else:
            self._disarm()

    def _disarm(self) -> None:
        if getattr(self, "_deadline", None) is not None:
            self._deadline.cancel()
            self._deadline = None

    def _refuse(self, status: int) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or not getattr(self.cycle, "response_started", True):  # no response begun yet
            self.transport.write(_REFUSALS[status])
        self.transport.close()


def guarded_protocol(max_connections: int, header_timeout_s: float, idle_timeout_s: float) -> type[H11Protocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` with these limits."""
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {"max_connections": max_connections, "header_timeout_s": header_timeout_s, "idle_timeout_s": idle_timeout_s},
    )
