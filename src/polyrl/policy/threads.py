"""How torch uses the CPU: how many threads when nobody says (``threads: null`` in training, no ``--threads`` in
serving), determinism, and whether freed memory stays in the process (``keep_freed_memory``)."""

from __future__ import annotations

import ctypes
import functools
import os
import sys

MAX_DEFAULT_THREADS = 4
THREADS_PER_CORE_LIMIT = 4
MAX_THREADS = 1024


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, which containers and ``taskset`` narrow)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_threads(cores: int) -> int:
    """Half of ``cores``, at least 1 and at most 4.

    torch's own default, one thread per core, collapses when anything else runs: its threads meet at a barrier
    after every operation, so one thread that shares its core with another process stalls all of them. Measured
    on a 2-core machine (docs/training.md, CPU threads): an SFT run with 2 threads took 6× longer beside one busy
    process, with 1 thread about as long as alone; on a loaded machine, one 8-token generation of the embedded model
    took 4.1 s with 2 threads and 0.21 s with 1. Half the cores leaves room for an editor, a browser or a second
    run; the cap of 4 is a judgement (a ~1 M-parameter model has little work per operation to split), not measured.
    """
    return max(1, min(MAX_DEFAULT_THREADS, cores // 2))


def check_threads(threads: int, cores: int | None = None) -> int:
    """``threads`` when it is at most :data:`THREADS_PER_CORE_LIMIT` per core of ``cores`` (default: those this
    process may use) and at most :data:`MAX_THREADS`; else ValueError, in one line.

    Threads beyond the cores only wait for each other (see :func:`default_threads`); a few per core still run,
    so a config written for a larger machine works on a smaller one. Thousands do not: ``threads=4096`` crashed
    the embedded model's first backward pass with a segmentation fault on a 2-core machine (1024 ran)."""
    cores = cores or available_cores()
    limit = min(MAX_THREADS, THREADS_PER_CORE_LIMIT * cores)
    if threads > limit:
        raise ValueError(
            f"{threads} torch threads is more than the {limit} allowed here ({THREADS_PER_CORE_LIMIT} per CPU core "
            f"this process may use, {cores}; at most {MAX_THREADS})"
        )
    return threads


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt parameters, glibc's malloc.h


@functools.cache
def keep_freed_memory() -> bool:
    """Make glibc's allocator keep memory that torch frees in the process, for the next tensor, instead of
    returning it to the kernel; True where that was done (Linux with glibc), False elsewhere.

    By default glibc serves large allocations (over 128 KiB at first, the threshold adapting up to 32 MiB) with
    their own ``mmap`` and unmaps them on ``free``, so each large tensor of a step — the ``[rows, vocabulary]``
    logits, an embedding's gradient, a layer's activations — starts as fresh pages that the kernel zero-fills
    one 4 KiB fault at a time (SmolLM2's ``[49152, 576]`` float32 ``zeros``: 76 ms, 11 ms in kept memory;
    docs/training.md, ``benchmarks/freed_memory.py``). Here
    large blocks come from the heap too and freed memory is not trimmed, so the process keeps its peak (which
    a training process reaches every step anyway); ``malloc_trim`` still returns it on demand."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False


def configure_torch(threads: int | None, deterministic: bool, device, keep_memory: bool) -> int:
    """Set torch's CPU threads (``threads``, or :func:`default_threads`) and, with ``deterministic``, make every
    run of the same config at the same thread count compute the same numbers on ``device`` (the run's; another
    thread count adds float reductions in another order: close, not identical; docs/training.md, "Determinism").
    Returns the threads.

    It switches on torch's deterministic algorithms (``torch.use_deterministic_algorithms``: on CPU the sorted
    accumulation of indexing backward passes such as that of ``x[rows, cols]``; on CUDA also cuDNN's and
    cuBLAS's deterministic kernels, cuBLAS with ``CUBLAS_WORKSPACE_CONFIG`` set before its first call unless the
    user set it). An operation without a deterministic implementation warns rather than stopping the run. With
    ``keep_memory``, :func:`keep_freed_memory` too."""
    import torch

    if keep_memory:
        keep_freed_memory()
    count = threads or default_threads(available_cores())
    torch.set_num_threads(count)
    if deterministic and torch.device(device).type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(deterministic, warn_only=True)
    return count
