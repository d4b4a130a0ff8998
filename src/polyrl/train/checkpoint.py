"""Atomic checkpoints: model, optimizer, scheduler, RNG states, sampler state, stage and step.

A checkpoint is written into a temporary directory and renamed into place; ``LATEST`` is then replaced
atomically. A run killed at any moment leaves either the previous checkpoint or the new one, never a
half-written one that would be loaded.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError

from polyrl.errors import UserError
from polyrl.run_dir import atomic_write_text, file_sha256

STATE_FILE = "trainer_state.json"


@dataclass
class Checkpoint:
    path: Path
    stage: str
    step: int
    state: dict[str, Any]


def _name(stage: str, step: int) -> str:
    return f"{stage}-{step:06d}"


def save_checkpoint(
    root: Path,
    stage: str,
    step: int,
    model,
    optimizer,
    scheduler,
    extra: dict[str, Any],
    keep: int,
    tensors: dict[str, Any] | None = None,
) -> Path:
    """``extra`` goes to JSON; ``tensors`` (e.g. the critic's state) to ``optim.pt``. A disk that fills up (or
    any other failed write) leaves the checkpoints there were, and stops the run with one line."""
    tmp = root / f".tmp-{_name(stage, step)}"
    try:
        return _write_checkpoint(root, tmp, stage, step, model, optimizer, scheduler, extra, keep, tensors)
    except Exception as exc:
        failure = write_failure(exc, root)
        if failure is None:
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        raise _not_written(f"checkpoint {_name(stage, step)} in {root}", root, failure) from None


def save_model_dir(final: Path, save: Callable[[Path], None]) -> None:
    """``save(directory)`` (a Hugging Face ``save_pretrained``) into ``final``, a model directory of a run
    (``RUN_DIR/sft_model``, ``RUN_DIR/final_model``), atomically: into a temporary directory, renamed into
    place. A failed write (a full disk) removes the partial one and stops the run with one line; the one
    there was stays, and the run's checkpoints resume it."""
    tmp = final.with_name(f".{final.name}.tmp")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        save(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    except Exception as exc:
        failure = write_failure(exc, final.parent)
        if failure is None:
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        raise _not_written(f"{final.name} in {final.parent}", final.parent / "checkpoints", failure) from None


def _not_written(what: str, checkpoints: Path, exc: OSError) -> UserError:
    """The one line for a write that failed: why, which checkpoint a resume starts from, how to resume."""
    try:
        kept = latest_checkpoint(checkpoints)
    except UserError:
        kept = None
    where = f"the last checkpoint, {kept.path.name}, is intact" if kept is not None else "no checkpoint was kept"
    return UserError(
        f"could not write {what}: {_reason(exc)}; {where} (free space, then polyrl train --resume {checkpoints.parent})"
    )


_WRITE_FAILURES = ("unexpected pos", "iostream error", "PytorchStreamWriter failed", "file write failed")
"""How torch.save's zip writer words a write that did not go through (seen on a full disk: "[enforce fail at
inline_container.cc:672] . unexpected pos 881093056 vs 881093008", "basic_ios::clear: iostream error")."""

_SAFETENSORS_IO = re.compile(r"I/O error: .*\(os error (\d+)\)")
"""How safetensors words a failed write (seen on a full disk: "Error while serializing: I/O error: No space left
on device (os error 28)"); any other SafetensorError is a bug, not the disk's."""


def write_failure(exc: BaseException, where: Path) -> OSError | None:
    """The OSError a failed write of weights stands for, whichever writer raised it; None when ``exc`` is not a
    failed write. ``where``: the directory written (its free space tells a full disk from another failure
    when torch's zip writer does not say)."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, SafetensorError):
        match = _SAFETENSORS_IO.search(str(exc))
        return OSError(int(match.group(1)), os.strerror(int(match.group(1)))) if match else None
    if isinstance(exc, RuntimeError) and any(s in str(exc) for s in _WRITE_FAILURES):
        try:
            full = shutil.disk_usage(where).free < 64 * 2**20
        except OSError:
            full = False
        return OSError(errno.ENOSPC if full else errno.EIO, "No space left on device" if full else "write failed")
    return None


def _reason(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full"
    return exc.strerror or str(exc)


def _write_checkpoint(root: Path, tmp: Path, stage, step, model, optimizer, scheduler, extra, keep, tensors) -> Path:
    final = root / _name(stage, step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # a LoRA model saves its adapters; PEFT's default ("auto") asks the Hub for the base's config.json at every
    # checkpoint when the base is a Hub id (a warning offline), to learn whether the vocabulary was resized: polyrl
    # never resizes it
    peft = {"save_embedding_layers": False} if hasattr(model, "peft_config") else {}
    model.save_pretrained(tmp / "model", safe_serialization=True, **peft)
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": rng_states(),
            "tensors": tensors or {},
        },
        tmp / "optim.pt",
    )
    # trainer_state.json is written last: its presence marks a complete checkpoint, and the digests of every
    # other file let a resume tell an intact checkpoint from one damaged after the fact
    files = {str(p.relative_to(tmp)): file_sha256(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
    state = {"stage": stage, "step": step, **extra, "files": files}
    atomic_write_text(tmp / STATE_FILE, json.dumps(state, indent=2))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    atomic_write_text(root / "LATEST", final.name + "\n")
    _prune(root, keep)
    return final


def _complete(root: Path) -> list[Path]:
    dirs = [d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".") and (d / STATE_FILE).exists()]
    order = {"sft": 0, "rl": 1}
    return sorted(dirs, key=lambda d: (order.get(d.name.split("-")[0], 2), d.name))


def _prune(root: Path, keep: int) -> None:
    for d in _complete(root)[:-keep]:
        shutil.rmtree(d, ignore_errors=True)
    for d in root.glob(".tmp-*"):
        shutil.rmtree(d, ignore_errors=True)


def _intact(path: Path) -> tuple[dict[str, Any] | None, str]:
    """The checkpoint's state if every file it lists is there with its digest; else None and what is wrong."""
    try:
        state = json.loads((path / STATE_FILE).read_text())
        stage, step = state["stage"], int(state["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, f"{STATE_FILE} is unreadable"
    if stage not in ("sft", "rl") or step < 0:
        return None, f"{STATE_FILE} names stage {stage!r} step {step}"
    for name, digest in state.get("files", {}).items():
        file = path / name
        if not file.is_file():
            return None, f"{name} is missing"
        if file_sha256(file) != digest:
            return None, f"{name} is damaged (checksum mismatch)"
    return state, ""


def latest_checkpoint(root: Path) -> Checkpoint | None:
    """The newest intact checkpoint under ``root``. A damaged newer one (a file cut short, edited or gone) is
    skipped with a one-line warning, so a run resumes from the one before it; when every checkpoint is damaged
    the run cannot go on from any of them, and a silent restart from step 0 would hide it: a user error."""
    if not root.exists():
        return None
    candidates = list(reversed(_complete(root)))
    pointer = root / "LATEST"
    if pointer.exists():
        named = root / pointer.read_text().strip()
        if named in candidates:  # LATEST first: it names the checkpoint written last
            candidates.remove(named)
            candidates.insert(0, named)
    problems = []
    for path in candidates:
        state, problem = _intact(path)
        if state is not None:
            for skipped in problems:
                warnings.warn(f"checkpoint {skipped}; resuming from {path.name}", stacklevel=2)
            return Checkpoint(path, state["stage"], int(state["step"]), state)
        problems.append(f"{path.name} is not usable ({problem})")
    if problems:
        raise UserError(
            f"no usable checkpoint in {root}: {'; '.join(problems)}; restore one, or start a new run in another run_dir"
        )
    return None


def _tied(model) -> set[str]:
    """Weights saved once for two names (tied embeddings): absent from a checkpoint by design."""
    return set(getattr(model, "_tied_weights_keys", None) or []) | {"lm_head.weight"}


def _saved_shapes(directory: Path, model) -> tuple[dict[str, tuple[int, ...]], str | None]:
    """Name → shape of the weights ``save_pretrained`` (or DCP, in a sharded run) wrote in ``directory``,
    read from the files' headers only; with what keeps them from this kind of model, if anything."""
    from safetensors import safe_open

    if (directory / ".metadata").is_file():  # torch.distributed.checkpoint shards (a multi-process run)
        from torch.distributed.checkpoint import FileSystemReader

        metadata = FileSystemReader(str(directory)).read_metadata().state_dict_metadata
        tensors = {k: v for k, v in metadata.items() if k.startswith("model.") and hasattr(v, "size")}
        return {k[len("model.") :]: tuple(v.size) for k, v in tensors.items()}, None
    adapters = (directory / "adapter_model.safetensors").is_file()
    if hasattr(model, "peft_config") != adapters:
        return {}, "it holds LoRA adapters and this model has none" if adapters else "this model has LoRA adapters"
    index = directory / "model.safetensors.index.json"
    if adapters:
        files = ["adapter_model.safetensors"]
    elif index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    shapes: dict[str, tuple[int, ...]] = {}
    for name in files:
        with safe_open(str(directory / name), "pt") as f:
            shapes.update({k: tuple(f.get_slice(k).get_shape()) for k in f.keys()})  # noqa: SIM118 (safe_open is not iterable)
    return shapes, None


def weights_mismatch(model, directory: Path, label: str) -> str | None:
    """Why the weights in ``directory`` (``label``, e.g. "checkpoint rl-000006") cannot load into ``model``:
    the first tensor whose name or shape differs, and how many more do; None when they fit. Reads headers
    only, so a resume can be checked before it writes anything."""
    saved, kind = _saved_shapes(directory, model)
    if kind is not None:
        return f"{label} does not fit this model ({kind})"
    if hasattr(model, "peft_config") and not (directory / ".metadata").is_file():  # DCP keeps the whole model
        from peft import get_peft_model_state_dict

        ours = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(model).items()}
    else:
        ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    problems = [
        f"{k} is {list(saved[k])} in {label} but {list(shape)} in this model"
        for k, shape in ours.items()
        if k in saved and tuple(saved[k]) != shape
    ]
    problems += [f"{k} is in {label} but not in this model" for k in saved if k not in ours]
    problems += [f"{k} is not in {label}" for k in ours if k not in saved and k not in _tied(model)]
    if not problems:
        return None
    return problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")


def load_model_weights(model, directory: Path) -> None:
    """Load weights written by ``save_pretrained`` into ``model`` in place (sharded, LoRA adapters too)."""
    from safetensors.torch import load_file

    if hasattr(model, "peft_config"):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(str(directory / "adapter_model.safetensors")))
        return
    index = directory / "model.safetensors.index.json"
    if not index.exists() and not (directory / "model.safetensors").is_file():
        raise UserError(f"{directory} holds no model weights (model.safetensors is missing): restore it")
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    )
    weights: dict[str, torch.Tensor] = {}
    for name in files:
        weights.update(load_file(str(directory / name)))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k not in _tied(model)]  # tied embeddings are saved once
    if missing or unexpected:
        raise RuntimeError(
            f"checkpoint {directory} does not match the model: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )


def load_training_state(ckpt: Checkpoint, model, optimizer, scheduler) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and RNG states; returns the ``tensors`` saved with them."""
    load_model_weights(model, ckpt.path / "model")
    blob = torch.load(ckpt.path / "optim.pt", weights_only=False)
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    restore_rng(blob["rng"])
    return blob.get("tensors", {})


def rng_states() -> dict[str, Any]:
    """The state of every generator a run draws from: Python's, numpy's, torch's CPU one and each CUDA device's
    (where CUDA has started; issue #42: only the CPU's was saved, so a resume on a GPU sampled from another stream).
    Each RL and SFT step reseeds torch on every device (``seed_step``); these states carry what runs between a
    checkpoint and the next step."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(), "cuda": cuda}


def restore_rng(states: dict[str, Any]) -> None:
    """Put back what :func:`rng_states` saved. CUDA devices get their own generator's state, as many as are saved
    and visible here; a checkpoint of a CPU run (or one written before issue #42) has none, and a CPU resume of a
    GPU run has no CUDA generator to give them to."""
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    cuda = states.get("cuda", [])
    if cuda and torch.cuda.is_available():
        for index, state in enumerate(cuda[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(state, index)
