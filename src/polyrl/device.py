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


MAX_DEVICE_INDEX = 127
"""The largest N of ``cuda:N``: torch keeps a device index in 8 signed bits (``torch.device('cuda:128')`` is
``cuda:-128``)."""


def check_device_spec(spec: str) -> str:
    """``spec`` if it names a device polyrl trains on (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``); a
    ValueError (the config's one-line message) otherwise. The one parser of a device name: the config, ``polyrl
    eval``/``serve --device`` and the benchmark scripts all come here, so ``cuda:`` and ``cuda:0:0``, an index
    written with other digits than ASCII ones (``cuda:٣``), with a sign or leading zeros, or beyond torch's range
    are refused here, not by torch's parser after the run has started."""
    kind, colon, index = spec.partition(":")
    numbered = index.isascii() and index.isdigit() and index == str(int(index)) and int(index) <= MAX_DEVICE_INDEX
    if kind not in DEVICE_KINDS or (colon and not (kind == "cuda" and numbered)):
        shown = repr(spec) if len(spec) <= 40 else repr(spec[:40]) + "…"
        raise ValueError(f"device {shown}: give auto, cpu, cuda, cuda:N (N from 0 to {MAX_DEVICE_INDEX}) or mps")
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
    A UserError when ``spec`` names no device (:func:`check_device_spec`) or the device is not there."""
    try:
        spec = _concrete(spec)
    except ValueError as exc:  # a name from a command-line option (eval, serve, a benchmark): one line
        raise UserError(str(exc)) from None
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
