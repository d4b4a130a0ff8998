"""Shared by the benchmark scripts: what machine a benchmark ran on, how its figures are printed for
docs/benchmarks.md, and what differs between the library versions they run on."""

from __future__ import annotations

import platform


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


SPEED_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2", "fma")
"""The ``/proc/cpuinfo`` flags that change a CPU's float kernels (which oneDNN picks, how it rounds): two machines
whose flags differ compute the same job's numbers with other last digits."""


def cpu_flags() -> list[str]:
    """Which of :data:`SPEED_FLAGS` this CPU has."""
    from polyrl.forward.precision import cpu_flags as all_flags

    return [flag for flag in SPEED_FLAGS if flag in all_flags()]


def machine() -> str:
    """The CPU, its float-kernel flags and its core count, as every figure is recorded with."""
    import os

    flags = ", ".join(cpu_flags()) or "no listed flags"
    return f"{cpu_model()} ({flags}), {os.cpu_count()} cores"


def device_option(spec: str, script: str):
    """The torch device a benchmark's ``--device`` names, read by polyrl's one device parser; a name it does not
    know (``cuda:``, ``cuda:٣``, ``meta``) or a device this machine lacks is one line on stderr and exit code 2,
    before the benchmark runs anything."""
    import sys

    from polyrl.device import resolve_device
    from polyrl.errors import UserError

    try:
        return resolve_device(spec)
    except UserError as exc:
        print(f"{script}: error: --device: {exc}", file=sys.stderr)
        sys.exit(2)


def mean_std(xs, fmt: str = "{:.1f}") -> str:
    """``mean ± std`` (sample std, over seeds) of ``xs``; just the mean for one value."""
    import numpy as np

    xs = np.asarray(xs, dtype=float)
    return fmt.format(xs.mean()) + (f" ± {fmt.format(xs.std(ddof=1))}" if len(xs) > 1 else "")


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def checkpointing_off(config_class) -> dict:
    """The keyword that turns activation checkpointing off in a ``TrainingArguments`` subclass (TRL's configs):
    later transformers 5 releases renamed ``gradient_checkpointing`` to ``activation_checkpointing`` (the old name
    deprecated, removed in v6); 5.17, on the lent GPU machine, knows only the old one."""
    fields = getattr(config_class, "__dataclass_fields__", {})
    return {"activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing": False}
