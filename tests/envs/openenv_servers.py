"""OpenEnv servers for the tests: ``examples/openenv_envs.py``'s environments under uvicorn on 127.0.0.1 (a free port),
each app counting the environments it holds open (``GET /test/open``), and one that allows two sessions at once.

Importable as ``openenv_servers`` (``tests/envs`` is on the path of the tests and of the server processes)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

HERE = Path(__file__).parent
EXAMPLES = HERE.parents[1] / "examples"
STARTUP_S = 90.0
"""How long a server may take to answer /health (importing openenv takes seconds on a loaded machine)."""


def _counted(cls):
    """``cls`` whose instances are counted while open (created and not yet closed)."""

    class Counted(cls):
        open = 0
        lock = threading.Lock()

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            with Counted.lock:
                Counted.open += 1

        def close(self):
            with Counted.lock:
                Counted.open -= 1
            super().close()

    Counted.__name__ = Counted.__qualname__ = cls.__name__
    return Counted


def _app(cls, action, observation, sessions: int = 64):
    from openenv.core import create_app

    counted = _counted(cls)
    app = create_app(counted, action, observation, max_concurrent_envs=sessions)
    app.get("/test/open")(lambda: {"open": counted.open})
    return app


def guess_app():
    from openenv_envs import Feedback, Guess, GuessNumber

    return _app(GuessNumber, Guess, Feedback)


def guess_app_two_sessions():
    from openenv_envs import Feedback, Guess, GuessNumber

    return _app(GuessNumber, Guess, Feedback, sessions=2)


def sums_app():
    from openenv.core.env_server import CallToolAction
    from openenv.core.env_server.types import Observation
    from openenv_envs import SumTools

    return _app(SumTools, CallToolAction, Observation)


def arithmetic_app():
    from openenv_envs import Answer, Arithmetic, Prompt

    return _app(Arithmetic, Answer, Prompt)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen

    def open_sessions(self) -> int:
        return httpx.get(f"{self.url}/test/open", timeout=10).json()["open"]

    def stall(self) -> None:
        """Stop the server process (it holds its sockets and answers nothing) until it is stopped."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)
        self.process.kill()
        self.process.wait(timeout=30)


@contextlib.contextmanager
def serve(app: str):
    """Serve ``openenv_servers:<app>`` on a free port of 127.0.0.1; stop it on exit."""
    port = free_port()
    paths = [str(EXAMPLES), str(HERE), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    command = [sys.executable, "-m", "uvicorn", "--factory", f"openenv_servers:{app}", "--host", "127.0.0.1"]
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen([*command, "--port", str(port), "--log-level", "warning"], env=env, stderr=log)
        server = Server(f"http://127.0.0.1:{port}", process)
        try:
            _wait_until_up(server, log)
            yield server
        finally:
            if process.poll() is None:
                server.kill()


def _wait_until_up(server: Server, log) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"the OpenEnv test server exited: {log.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the OpenEnv test server did not answer within {STARTUP_S} s")
