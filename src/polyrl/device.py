"""The device a run trains on, decided once: the config's ``device`` made concrete.

The placement (``train/placement.py``) resolves it at the start of a run and owns it from then on: the policy, the
KL reference and the critic are put there, every training batch moves there with one ``.to(device)``, and no
function below asks the weights where they live. ``auto`` (the default) is CUDA when this machine has it, the CPU
otherwise; a CUDA device on a machine without CUDA is one line at the start, not a crash at the first update.
"""

from __future__ import annotations

import torch

from polyrl.errors import UserError

DEVICE_KINDS = ("auto", "cpu", "cuda", "mps")

DEFAULT_DEVICE = "auto"
"""What a run, ``polyrl eval`` and ``polyrl serve`` use when no device is named: CUDA when present, else the CPU."""

HOST = torch.device("cpu")
"""Where a library function called without a device works (a script that builds its own model on the CPU); a run
never relies on it: its placement passes the device it resolved."""


def check_device_spec(spec: str) -> str:
    """``spec`` if it names a device polyrl trains on (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``); a
    ValueError (the config's one-line message) otherwise."""
    kind, _, index = spec.partition(":")
    if kind not in DEVICE_KINDS or (index and (kind != "cuda" or not index.isdigit())):
        raise ValueError(f"device {spec!r}: give auto, cpu, cuda, cuda:N or mps")
    return spec


def _concrete(spec: str) -> str:
    """``spec``, checked, with ``auto`` made ``cuda`` (when CUDA is available) or ``cpu``."""
    if check_device_spec(spec) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return spec


def device_kind(spec: str) -> str:
    """``cpu``, ``cuda`` or ``mps``: what ``spec`` resolves to here, without checking that the device exists (the
    config's cross-checks: an engine that needs CUDA, fp16 autocast)."""
    return _concrete(spec).partition(":")[0]


def resolve_device(spec: str, local_rank: int | None = None) -> torch.device:
    """The torch device ``spec`` means on this machine: ``auto`` → ``cuda`` when CUDA is available, else ``cpu``;
    under ``torchrun`` (``local_rank`` given) a CUDA device is this process's own GPU, ``cuda:LOCAL_RANK``.
    A UserError when the device is not there."""
    spec = _concrete(spec)
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(
                f"device={spec} but this machine has no CUDA device (torch {torch.__version__}); "
                "use device=cpu or device=auto"
            )
        if local_rank is not None:
            device = torch.device("cuda", local_rank)
        elif device.index is None:
            device = torch.device("cuda", _current_cuda_index())
        if device.index >= torch.cuda.device_count():
            raise UserError(f"device={device} but this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise UserError(f"device={spec} but MPS is not available here; use device=cpu or device=auto")
    return device


def _current_cuda_index() -> int:
    try:
        return torch.cuda.current_device()
    except (AssertionError, RuntimeError):  # a build whose CUDA cannot start here: the first device
        return 0


def describe(device: torch.device) -> str:
    """One line for the start of a run: the device and what it is."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)
