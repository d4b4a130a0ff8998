"""How many CPU threads torch uses when nobody says (``threads: null`` in training, no ``--threads`` in serving)."""

from __future__ import annotations

import os

MAX_DEFAULT_THREADS = 4


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
