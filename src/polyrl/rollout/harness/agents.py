"""Running the user's agent function for one episode, so that whatever it does ends with its episode.

Each episode's agent runs on a daemon thread of its own — a coroutine function on an event loop of its own
there — with an HTTP client of its own pointed at the episode's base URL. So:

* anything it raises, ``SystemExit`` and ``KeyboardInterrupt`` included, is its episode's failure (the
  rollout counts it), never the trainer's exit; a real Ctrl-C reaches the trainer's own thread as before;
* an agent that blocks (``time.sleep`` in a coroutine, a busy loop, a call that never returns) blocks its
  own thread only: at its episode's ``timeout_s`` the rollout abandons it (:func:`abandon`), raising
  :class:`AgentTimeout` into the thread — which stops Python code at once and a blocking call when it
  returns — and the thread, a daemon, can never hold the trainer's exit;
* the processes it started are ended when it returns, raises or is abandoned (:mod:`.children`).
"""

from __future__ import annotations

import asyncio
import ctypes
import ssl
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from polyrl.rollout.harness.children import end_processes, thread_children

_TLS: list[ssl.SSLContext] = []
"""One TLS context for every client (the endpoint is plain HTTP, but httpx builds one per client without it,
at ~10 ms each)."""


class AgentTimeout(BaseException):
    """Raised into the thread of an agent whose episode timed out (a BaseException, so that the agent's own
    ``except Exception`` does not swallow it)."""


@dataclass
class AgentCall:
    """One episode's agent, running."""

    thread: threading.Thread | None = None
    tid: int | None = None
    """The thread's kernel id: the children it starts are listed under it."""
    future: Future = field(default_factory=Future)
    """Done when the agent returned (its value) or raised (the exception, of any kind)."""


def start_agent(task, base_url: str, problem, name: str) -> AgentCall:
    """Call ``task``'s agent for ``problem`` on a new daemon thread (``polyrl-agent-<name>``)."""
    call = AgentCall()
    call.future.set_running_or_notify_cancel()

    def body() -> None:
        call.tid = threading.get_native_id()
        try:
            try:
                value = _run(task, base_url, problem)
            except BaseException as exc:  # SystemExit, KeyboardInterrupt, AgentTimeout: this episode's failure
                call.future.set_exception(exc)
            else:
                call.future.set_result(value)
            finally:
                end_processes(thread_children(call.tid))
        except AgentTimeout:  # raised into the thread as it was finishing: abandon() ends its processes
            pass

    call.thread = threading.Thread(target=body, name=f"polyrl-agent-{name}", daemon=True)
    call.thread.start()
    return call


def abandon(call: AgentCall) -> None:
    """Give up on a running agent: end its processes and raise :class:`AgentTimeout` into its thread."""
    if call.thread is None or not call.thread.is_alive():
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(call.thread.ident), ctypes.py_object(AgentTimeout))
    if call.tid is not None:
        end_processes(thread_children(call.tid))


def _http(cls):
    """An HTTP client for one agent: no proxy from the environment (the endpoint is on loopback), no timeout
    of its own (the episode has one)."""

    if not _TLS:
        _TLS.append(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    return cls(verify=_TLS[0], trust_env=False, timeout=None)


def _run(task, base_url: str, problem) -> Any:
    if task.wants_url:
        result = task.agent(base_url, problem)
        return asyncio.run(result) if task.is_async else result
    import httpx

    if task.is_async:
        return asyncio.run(_run_async(task, base_url, problem))
    with _http(httpx.Client) as http:
        return task.agent(task.client(base_url, http), problem)


async def _run_async(task, base_url: str, problem) -> Any:
    import httpx

    async with _http(httpx.AsyncClient) as http:
        return await task.agent(task.client(base_url, http), problem)
