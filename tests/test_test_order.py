"""The suite's own ``--test-order`` option (tests/conftest.py): a value it cannot read is pytest's usage error, not
an INTERNALERROR traceback (issue #43: ``random:--1`` and ``random:²`` passed the digit check and failed in int())."""

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _collect(order: str) -> subprocess.CompletedProcess:
    """``pytest --collect-only`` of this file under ``--test-order order``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--collect-only",
            "-p",
            "no:cacheprovider",
            "--test-order",
            order,
            str(TESTS / "test_test_order.py"),
        ],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("order", ["random:--1", "random:\u00b2", "random:\u0663", "random:", "random:1.5", "shuffle"])
def test_an_order_the_option_cannot_read_is_a_usage_error(order):
    done = _collect(order)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr
    assert f"--test-order {order!r}: give file, reverse or random:SEED (e.g. random:1)" in done.stderr


@pytest.mark.parametrize("order", ["file", "reverse", "random:1", "random:-7"])
def test_the_orders_it_takes_collect_the_tests(order):
    done = _collect(order)
    assert done.returncode == 0, done.stdout + done.stderr
