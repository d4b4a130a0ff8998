"""Experiment trackers: every metrics record of a run, its resolved config and its final results, sent to
TensorBoard, trackio, Weights & Biases or MLflow (``logging.trackers``), besides ``RUN_DIR/metrics.jsonl``.

Every tracker sees the same names on the same axis: a record ``{"stage": "rl", "step": 3, "global_step": 303,
"loss": 0.2}`` is the scalar ``rl/loss`` (``scalars``) at step 303, the run's global step, which counts SFT's steps
and then RL's, so that the stages and the evaluations between them (``eval/*`` after SFT at SFT's last step, after
RL at RL's last) are plotted in the order they happened. The final held-out results are
``final/after_rl/mean/accuracy`` and the like (``final_scalars``). MLflow alone refuses some characters: there ``eval/pass@1/addition`` is
``eval/pass_at_1/addition`` (``mlflow_name``). Each tracker opens on first use, so a run that stops before logging anything leaves
no empty tracker run behind. All of them work offline: TensorBoard and trackio write local files, W&B runs in
offline mode by default (``wandb sync RUN_DIR/wandb/offline-run-*`` uploads later), MLflow writes its local
database ``RUN_DIR/mlflow.db`` (artifacts in ``RUN_DIR/mlartifacts``) unless ``logging.mlflow_tracking_uri``
names another store. (MLflow's file store cannot hold both ``rl/reward`` and ``rl/reward/addition``.)
"""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from polyrl.errors import UserError
from polyrl.registry import Registry


@dataclass(frozen=True)
class TrackerKind:
    """A registered tracker: its class, the modules it imports and the pip requirement that installs them."""

    cls: type[Tracker]
    packages: tuple[str, ...] = ()
    extra: str = "polyrl"


def _tracker_entry(name: str, cls: Any, **metadata: Any) -> TrackerKind:
    if not (isinstance(cls, type) and issubclass(cls, Tracker)):
        raise TypeError(f"register_tracker expects a Tracker subclass, got {cls!r}")
    return TrackerKind(cls, **metadata)


TRACKERS: Registry[TrackerKind] = Registry(
    "tracker", "polyrl.trackers", builtins=("polyrl.trackers",), entry=_tracker_entry
)
"""``logging.trackers`` names: the built-ins below and the plugins of the ``polyrl.trackers`` entry-point group."""


def register_tracker(name: str, *, packages: tuple[str, ...] = (), extra: str = "polyrl") -> Callable[[type], type]:
    """Class decorator: a :class:`Tracker` subclass becomes ``logging.trackers: [name]``; ``packages`` are the
    modules it imports (checked before the run starts), ``extra`` what to pip-install when one is missing."""
    return TRACKERS.register(name, packages=packages, extra=extra)


def _known_tracker(name: str) -> str:
    try:
        TRACKERS.lookup(name)
    except UserError as exc:
        raise ValueError(str(exc)) from None
    return name


TrackerName = Annotated[str, AfterValidator(_known_tracker)]


class LoggingConfig(BaseModel):
    """Where a run's metrics go besides ``metrics.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    trackers: list[TrackerName] = Field(
        default_factory=list,
        description="Experiment trackers that receive every metric, the config and the final results: tensorboard, trackio, wandb, mlflow (tensorboard is added while `tensorboard` is true).",
    )
    project: str = Field("polyrl", description="Project (trackio, W&B) or experiment (MLflow) the run is filed under.")
    run_name: str | None = Field(
        None, description="The run's name in the trackers (default: the run directory's name)."
    )
    wandb_mode: Literal["offline", "online"] = Field(
        "offline", description="W&B: offline writes RUN_DIR/wandb (upload with `wandb sync`); online needs a login."
    )
    mlflow_tracking_uri: str | None = Field(
        None, description="MLflow tracking URI (default: the local database RUN_DIR/mlflow.db)."
    )


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The numeric values of one metrics record, named ``<stage>/<key>`` (the steps and text left out)."""
    stage = record["stage"]
    return {
        f"{stage}/{key}": float(value)
        for key, value in record.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in ("step", "global_step")
    }


def global_step(record: dict[str, Any]) -> int:
    """The step a record is plotted at: its ``global_step`` (a record of an earlier version: its stage's step)."""
    return record.get("global_step", record["step"])


def final_scalars(results: dict[str, Any], prefix: str = "final") -> dict[str, float]:
    """The numeric leaves of the held-out results (``{"after_rl": {"mean": {"accuracy": 0.5}}}``), named by
    their path: ``final/after_rl/mean/accuracy``."""
    out: dict[str, float] = {}
    for key, value in results.items():
        name = f"{prefix}/{key}"
        if isinstance(value, dict):
            out |= final_scalars(value, name)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """The config as ``section.key`` → text, for trackers whose parameters are flat strings (MLflow)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out |= flat_config(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = json.dumps(value) if not isinstance(value, str) else value
    return out


def mlflow_name(name: str) -> str:
    """``name`` in the characters MLflow accepts in a metric name (``@`` reads ``_at_``, others ``_``)."""
    return re.sub(r"[^\w\-. :/]", "_", name.replace("@", "_at_"))


class Tracker:
    """One experiment tracker. ``log`` receives every record, ``finish`` the final results once, ``close``
    ends its run; the first call opens it with the run's config."""

    def __init__(self, run_dir: Path, settings: LoggingConfig, config: dict[str, Any]):
        self.run_dir, self.settings, self.config = run_dir, settings, config
        self.name = settings.run_name or run_dir.resolve().name
        self.opened = False
        self.last_step = 0

    def log(self, record: dict[str, Any]) -> None:
        self._ensure_open()
        self.last_step = global_step(record)
        self._log(scalars(record), record["stage"], self.last_step)

    def finish(self, results: dict[str, Any]) -> None:
        self._ensure_open()
        self._finish(final_scalars(results))

    def close(self) -> None:
        if self.opened:
            self._close()
            self.opened = False

    def _ensure_open(self) -> None:
        if not self.opened:
            self._open()
            self.opened = True

    # each tracker: open its run with the config, log one record's scalars at the global step, the final ones, close
    def _open(self) -> None:
        raise NotImplementedError

    def _log(self, values: dict[str, float], stage: str, step: int) -> None:
        raise NotImplementedError

    def _finish(self, values: dict[str, float]) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError


@register_tracker("tensorboard", packages=("tensorboard",))
class TensorBoardTracker(Tracker):
    """Event files in ``RUN_DIR/tb``, every stage on the global-step axis."""

    def _open(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(self.run_dir / "tb"))
        self.writer.add_text("config", "```\n" + json.dumps(self.config, indent=2) + "\n```")

    def _log(self, values, stage, step) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)

    def _finish(self, values) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, self.last_step)

    def _close(self) -> None:
        self.writer.close()


@register_tracker("trackio", packages=("trackio",), extra="polyrl[trackio]")
class TrackioTracker(Tracker):
    """A local trackio project (``$TRACKIO_DIR``, by default in the Hugging Face cache; ``trackio show``)."""

    def _open(self) -> None:
        import trackio

        self.run = trackio.init(
            project=self.settings.project,
            name=self.name,
            config=self.config,
            embed=False,
            auto_log_gpu=False,
            auto_log_cpu=False,
        )

    def _log(self, values, stage, step) -> None:
        self.run.log(values, step=step)

    def _finish(self, values) -> None:
        self.run.log(values, step=self.last_step)

    def _close(self) -> None:
        import trackio

        # trackio.finish, not Run.finish: it also forgets the run, which trackio's exit hook would otherwise
        # finish a second time, printing "Uploading logs to Trackio" after the run (issue #43)
        try:
            trackio.finish()
        except RuntimeError:  # the run is not this context's current one (opened on another thread)
            self.run.finish()


@register_tracker("wandb", packages=("wandb",), extra="polyrl[wandb]")
class WandbTracker(Tracker):
    """A W&B run in ``RUN_DIR/wandb``; every metric is plotted against ``global_step``, logged as a hidden metric
    of its own (W&B's custom x-axis) rather than as W&B's step, which would merge the records of two stages that
    share a global step (the last RL step and the after-RL evaluation). The final results are the run's summary."""

    def _open(self) -> None:
        import wandb

        self.run = wandb.init(
            project=self.settings.project,
            name=self.name,
            dir=str(self.run_dir),
            mode=self.settings.wandb_mode,
            config=self.config,
            settings=wandb.Settings(silent=True, console="off"),
            reinit="create_new",
        )
        self.run.define_metric("global_step", hidden=True)
        self.stages: set[str] = set()

    def _log(self, values, stage, step) -> None:
        if stage not in self.stages:
            self.run.define_metric(f"{stage}/*", step_metric="global_step")
            self.stages.add(stage)
        self.run.log({**values, "global_step": step})

    def _finish(self, values) -> None:
        self.run.summary.update(values)

    def _close(self) -> None:
        self.run.finish()


@register_tracker("mlflow", packages=("mlflow", "sqlalchemy", "alembic"), extra="polyrl[mlflow]")  # its local database
class MlflowTracker(Tracker):
    """An MLflow run: the config as parameters (``section.key``) and as ``config.json``, metrics per step."""

    def _open(self) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri, artifacts = self.settings.mlflow_tracking_uri, None
        if uri is None:  # a store of the run's own: MLflow's local database and an artifact folder beside it
            uri = f"sqlite:///{(self.run_dir / 'mlflow.db').resolve()}"
            artifacts = (self.run_dir / "mlartifacts").resolve().as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(self.settings.project)
        if experiment is None:
            exp_id = self.client.create_experiment(self.settings.project, artifact_location=artifacts)
        else:
            exp_id = experiment.experiment_id
        self.run_id = self.client.create_run(exp_id, run_name=self.name).info.run_id
        params = [Param(k, v[:6000]) for k, v in flat_config(self.config).items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters per batch
            self.client.log_batch(self.run_id, params=params[i : i + 100])
        self.client.log_dict(self.run_id, self.config, "config.json")

    def _metrics(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_name(k), v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def _log(self, values, stage, step) -> None:
        self._metrics(values, step)

    def _finish(self, values) -> None:
        self._metrics(values, self.last_step)

    def _close(self) -> None:
        self.client.set_terminated(self.run_id)


def open_trackers(settings: LoggingConfig, run_dir: str | Path, config: dict[str, Any]) -> list[Tracker]:
    """The trackers ``settings`` lists, for the run in ``run_dir`` with resolved ``config`` (JSON-ready); a
    tracker whose package is missing is a user error naming the extra to install."""
    out = []
    for name in settings.trackers:
        kind = TRACKERS.lookup(name)
        modules, extra = kind.packages, kind.extra
        if name == "mlflow" and settings.mlflow_tracking_uri is not None:
            modules = modules[:1]  # another store: MLflow's client alone
        for module in modules:
            if importlib.util.find_spec(module) is None:
                raise UserError(
                    f"logging.trackers lists {name}, which needs the {module} package: pip install '{extra}'"
                )
        out.append(kind.cls(Path(run_dir), settings, config))
    return out
