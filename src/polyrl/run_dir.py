"""The run directory: resolved config, metrics (jsonl + TensorBoard), checkpoints, models, eval results.

Layout::

    RUN_DIR/config.yaml        the resolved config
    RUN_DIR/metrics.jsonl      one JSON object per logged step
    RUN_DIR/tb/                TensorBoard event files (wandb/, mlflow.db with those trackers: trackers.py)
    RUN_DIR/checkpoints/       step directories + LATEST (see checkpoint.py)
    RUN_DIR/sft_model/         Hugging Face checkpoint after the warm start
    RUN_DIR/final_model/       Hugging Face checkpoint after RL
    RUN_DIR/eval/*.json        held-out results

    RUN_DIR/.lock              held (``flock``) by the one trainer that writes the directory

Every file is written atomically (temp file + rename), so a killed run never leaves a half-written one.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from polyrl.errors import UserError

if TYPE_CHECKING:
    from polyrl.trackers import Tracker

LOCK_FILE = ".lock"
_SKELETON = {LOCK_FILE, ".write-test", "checkpoints", "eval"}
"""What :meth:`RunDir.create` makes before the config is saved: a run killed that early left only these."""
_HELD: dict[str, list] = {}
"""Lock files this process holds: real path → [open file, how many RunDir views hold it]."""


def _drop_locks_in_child() -> None:
    """In a process forked from a trainer (by an agent, a tool, ``multiprocessing``): let go of the run
    directory's lock. Its descriptor is close-on-exec already, but a fork without exec keeps it, and with it
    the lock, after the trainer ends — a later ``--resume`` was refused naming the trainer's dead pid. The
    descriptor is pointed at /dev/null (the parent's hold is unaffected) and forgotten."""
    for file, _ in _HELD.values():
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, file.fileno())
        os.close(null)
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_locks_in_child)


class ResumeRecord(BaseModel):
    """Overrides given with ``polyrl train --resume``, recorded in ``config.yaml`` with where they took effect."""

    model_config = ConfigDict(extra="forbid")
    stage: str = Field(description="Stage of the checkpoint the resumed run started from (sft, rl; none: none).")
    step: int = Field(description="Step of that checkpoint: the overrides apply from the step after it.")
    overrides: dict[str, Any] = Field(description="Each changed setting (dotted key) with its new value.")


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in blocks: a checkpoint's files, a model file the cache is keyed by."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


class RunDir:
    writes = True
    """False for a view that leaves every write to another process (:class:`SilentRunDir`)."""

    def __init__(self, path: str | Path, trackers: list[Tracker] | None = None):
        self.path = Path(path)
        self.trackers = trackers or []
        """Experiment trackers (TensorBoard, trackio, W&B, MLflow) that receive every record and the results."""
        self._lock = None

    # -- paths ----------------------------------------------------------------------------------------
    @property
    def config_file(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics_file(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def model_dir(self, name: str) -> Path:
        return self.path / name

    def eval_file(self, name: str) -> Path:
        return self.path / "eval" / f"{name}.json"

    # -- setup ----------------------------------------------------------------------------------------
    def create(self, resume: bool) -> None:
        """Make the directory (checking it is writable) and lock it for this process. A fresh run refuses a
        directory holding a run, or anything else that is not an empty one; a resume needs a run's config."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"run directory {str(self.path)!r} is not writable: {exc.strerror or exc}") from None
        lock_was_there = (self.path / LOCK_FILE).exists()
        self._acquire_lock()
        if not resume and self.config_file.exists():
            self.release()
            raise UserError(
                f"run directory {str(self.path)!r} already holds a run: use --resume {self.path} or another run_dir"
            )
        if resume and not self.config_file.exists():
            self.release()
            raise UserError(f"{str(self.path)!r} is not a polyrl run directory (no config.yaml)")
        foreign = [] if resume else self._foreign_entries()
        if foreign:
            self.release()
            if not lock_was_there:  # leave the directory exactly as it was
                (self.path / LOCK_FILE).unlink(missing_ok=True)
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise UserError(
                f"run directory {str(self.path)!r} is not empty and holds no polyrl run ({shown}): "
                "a fresh run writes only into an empty or new directory"
            )
        try:
            for d in (self.checkpoints, self.path / "eval"):
                d.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as exc:
            self.release()
            raise UserError(f"run directory {str(self.path)!r} is not writable: {exc.strerror or exc}") from None

    def _acquire_lock(self) -> None:
        """Hold ``RUN_DIR/.lock`` exclusively until :meth:`release` (or this process ends, when the kernel
        drops it: a killed trainer never leaves a stale lock). A trainer of another process is refused before
        it writes; in this process the lock is shared (counted), so an abandoned Trainer object does not lock
        its directory against the next one."""
        key = os.path.realpath(self.path / LOCK_FILE)
        if key in _HELD:
            _HELD[key][1] += 1
            self._lock = key
            return
        try:
            file = open(key, "a+")  # noqa: SIM115 (held open until release)
        except OSError as exc:
            raise UserError(f"run directory {str(self.path)!r} is not writable: {exc.strerror or exc}") from None
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            file.seek(0)
            holder = file.read(64).strip()
            file.close()
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise UserError(f"cannot lock run directory {str(self.path)!r}: {exc.strerror or exc}") from None
            raise UserError(
                f"run directory {str(self.path)!r} is in use by another polyrl train"
                + (f" (pid {holder})" if holder.isdigit() else "")
                + ": wait for it to end, or use another run_dir"
            ) from None
        file.truncate(0)
        file.write(f"{os.getpid()}\n")
        file.flush()
        _HELD[key] = [file, 1]
        self._lock = key

    def release(self) -> None:
        """Give up this view's hold on the directory's lock (another trainer may then open it)."""
        if self._lock is None:
            return
        held = _HELD.get(self._lock)
        if held is None:  # a forked child, which holds nothing (_drop_locks_in_child)
            self._lock = None
            return
        held[1] -= 1
        if held[1] == 0:
            held[0].close()
            del _HELD[self._lock]
        self._lock = None

    def _foreign_entries(self) -> list[str]:
        """Entries of the directory a fresh run did not make (the skeleton of a run killed at start-up aside)."""
        foreign = []
        for entry in sorted(self.path.iterdir(), key=lambda e: e.name):
            if entry.name not in _SKELETON or (entry.is_dir() and any(entry.iterdir())):
                foreign.append(entry.name + ("/" if entry.is_dir() else ""))
        return foreign

    # -- metrics --------------------------------------------------------------------------------------
    def log(self, record: dict[str, Any]) -> None:
        """Append one metrics record (must contain ``stage`` and ``step``) to jsonl and send it to the trackers."""
        with open(self.metrics_file, "a") as f:
            f.write(json.dumps(_clean(record)) + "\n")
        for tracker in self.trackers:
            tracker.log(record)

    def log_results(self, results: dict[str, Any]) -> None:
        """Send the run's final held-out results to the trackers (``metrics.jsonl`` holds them as eval records)."""
        for tracker in self.trackers:
            tracker.finish(results)

    def metrics_lines(self) -> int:
        """Complete records in ``metrics.jsonl`` (a checkpoint stores this, so that a resume keeps exactly them)."""
        if not self.metrics_file.exists():
            return 0
        return self.metrics_file.read_bytes().count(b"\n")

    def keep_metrics(self, lines: int) -> None:
        """Keep the first ``lines`` records: the ones logged before the checkpoint a resumed run starts from.
        Everything after it is redone, and logged again, exactly once."""
        if not self.metrics_file.exists():
            return
        kept = self.metrics_file.read_bytes().split(b"\n")[:lines]
        atomic_write_bytes(self.metrics_file, b"".join(line + b"\n" for line in kept))  # bytes kept as they are

    def truncate_metrics(self, stage: str, step: int) -> None:
        """Drop records logged after a checkpoint that predates ``metrics_lines`` (older runs)."""
        if not self.metrics_file.exists():
            return
        order = {"sft": 0, "eval": 1, "rl": 2}
        keep = []
        for line in self.metrics_file.read_bytes().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill, or not UTF-8
            if (order.get(rec.get("stage"), 1), rec.get("step", 0)) <= (order[stage], step):
                keep.append(line)
        atomic_write_bytes(self.metrics_file, b"".join(k + b"\n" for k in keep))

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_file.exists():
            return []
        out = []
        for line in self.metrics_file.read_bytes().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut by a kill, or not UTF-8
        return out

    def save_json(self, path: Path, data: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(_clean(data), indent=2))

    def save_lines(self, path: Path, records: list[Any]) -> None:
        """``records`` as JSON lines, written whole or not at all."""
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(json.dumps(_clean(r)) + "\n" for r in records))

    def close(self) -> None:
        """Close the trackers (flushing them) and give up the lock."""
        for tracker in self.trackers:
            tracker.close()
        self.release()


class SilentRunDir(RunDir):
    """The run directory as seen by a rank other than 0 in multi-process training: the same paths to read
    (checkpoints, models), but every write is rank 0's, so this one writes nothing."""

    writes = False

    def create(self, resume: bool) -> None:
        """Nothing to make: rank 0 creates the directory and checks it."""

    def log(self, record: dict[str, Any]) -> None:
        """Rank 0 logs the step."""

    def log_results(self, results: dict[str, Any]) -> None:
        """Rank 0 sends the results."""

    def keep_metrics(self, lines: int) -> None:
        """Rank 0 owns ``metrics.jsonl``."""

    def truncate_metrics(self, stage: str, step: int) -> None:
        """Rank 0 owns ``metrics.jsonl``."""

    def save_json(self, path: Path, data: Any) -> None:
        """Rank 0 writes the results."""

    def save_lines(self, path: Path, records: list[Any]) -> None:
        """Rank 0 writes the results."""
