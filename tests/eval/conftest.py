"""Fixtures for evaluation tests: a tiny checkpoint on disk and `polyrl serve` on loopback (the scripted fake
endpoint is the shared tests/fake_openai.py)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from polyrl.device import HOST

TINY = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """An (untrained) tiny Llama saved as a plain Hugging Face checkpoint."""
    from polyrl.policy.loading import ModelConfig, load_policy

    path = tmp_path_factory.mktemp("ckpt") / "tiny_model"
    load_policy(ModelConfig(tiny=TINY), device=HOST).save(path)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on."""
    return free_port()


@pytest.fixture(scope="session")
def served(tiny_checkpoint):
    """`polyrl serve`'s app for the tiny checkpoint, run by uvicorn in a thread on a free loopback port."""
    uvicorn = pytest.importorskip("uvicorn")
    from polyrl.policy.loading import ModelConfig, load_policy
    from polyrl.serve import build_app

    app = build_app(load_policy(ModelConfig(path=str(tiny_checkpoint)), device=HOST), "tiny")
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
