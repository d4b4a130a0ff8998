"""The device ``gpu_check.sh`` runs every check on, checked before any check runs.

    python benchmarks/gpu/check_device.py SPEC

SPEC (``GPU_CHECK_DEVICE``) is read by polyrl's one device parser (``polyrl.device``) and must be a device this
machine has: ``cuda``, ``cuda:N`` or ``cpu`` (``auto`` is whichever of them is here). The check's commands are
CUDA's or the CPU's (the memory check measures CUDA's allocator or the process's resident set; FSDP uses nccl or
gloo), so ``mps`` is refused too. Prints one line, ``KIND INDEX DESCRIPTION`` (``cuda 7 cuda:7 (NVIDIA H100 …) torch …``,
``cpu - cpu torch …``); anything else is one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys

RUNS_ON = ("cuda", "cpu")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: check_device.py SPEC", file=sys.stderr)
        return 2
    spec = argv[0]
    import torch

    from polyrl.device import describe, resolve_device
    from polyrl.errors import UserError

    try:
        device = resolve_device(spec)
    except UserError as exc:
        print(f"gpu_check: GPU_CHECK_DEVICE={spec!r}: {exc}", file=sys.stderr)
        return 2
    if device.type not in RUNS_ON:
        print(
            f"gpu_check: GPU_CHECK_DEVICE={spec!r}: the checks run on cuda, cuda:N or cpu, not {device}",
            file=sys.stderr,
        )
        return 2
    index = "-" if device.index is None else str(device.index)
    print(device.type, index, describe(device), "torch", torch.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
