"""The run directory: resolved config, metrics (jsonl + TensorBoard), checkpoints, models, eval results.

Layout::

    RUN_DIR/config.yaml        the resolved config
    RUN_DIR/metrics.jsonl      one JSON object per logged step
    RUN_DIR/tb/                TensorBoard event files (wandb/, mlflow.db with those trackers: trackers.py)
    RUN_DIR/checkpoints/       step directories + LATEST (see checkpoint.py)
    RUN_DIR/sft_model/         Hugging Face checkpoint after the warm start
    RUN_DIR/final_model/       Hugging Face checkpoint after RL
    RUN_DIR/eval/*.json        held-out results

Every file is written atomically (temp file + rename), so a killed run never leaves a half-written one.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from polyrl.errors import UserError

if TYPE_CHECKING:
    from polyrl.trackers import Tracker


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
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
        """Make the directory (checking it is writable). A fresh run refuses a directory holding a run."""
        if not resume and self.config_file.exists():
            raise UserError(
                f"run directory {str(self.path)!r} already holds a run: use --resume {self.path} or another run_dir"
            )
        if resume and not self.config_file.exists():
            raise UserError(f"{str(self.path)!r} is not a polyrl run directory (no config.yaml)")
        try:
            for d in (self.path, self.checkpoints, self.path / "eval"):
                d.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-test"
            probe.write_text("ok")
            probe.unlink()
        except OSError as exc:
            raise UserError(f"run directory {str(self.path)!r} is not writable: {exc.strerror or exc}") from None

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
        atomic_write_text(self.metrics_file, "".join(line.decode() + "\n" for line in kept))

    def truncate_metrics(self, stage: str, step: int) -> None:
        """Drop records logged after a checkpoint that predates ``metrics_lines`` (older runs)."""
        if not self.metrics_file.exists():
            return
        order = {"sft": 0, "eval": 1, "rl": 2}
        keep = []
        for line in self.metrics_file.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by a kill
            if (order.get(rec.get("stage"), 1), rec.get("step", 0)) <= (order[stage], step):
                keep.append(line)
        atomic_write_text(self.metrics_file, "".join(k + "\n" for k in keep))

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_file.exists():
            return []
        out = []
        for line in self.metrics_file.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def save_json(self, path: Path, data: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(_clean(data), indent=2))

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


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
