"""Experiment trackers (``logging.trackers``): one tiny run sends the same metric names, on the same global-step axis
(SFT's steps, then RL's; the after-SFT evaluation left of the after-RL one), its config and its final results to
TensorBoard, trackio, W&B (offline) and MLflow (local file store); each is read back offline.
A tracker whose package is missing is skipped here with the reason (CI installs polyrl[trackers])."""

import glob
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polyrl.errors import UserError
from polyrl.trackers import LoggingConfig, final_scalars, global_step, mlflow_name, open_trackers, scalars

# trackio reads its directory once, when imported: point it into this session's temporary tree first
if "trackio" not in sys.modules:
    os.environ.setdefault(
        "TRACKIO_DIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), f"polyrl-trackio-{os.getpid()}")
    )

SMALL = {"sft__steps": 2, "rl__steps": 2, "eval__problems_per_task": 2, "threads": 1}
RL_STEPS = [3, 4]
"""The global steps of SMALL's RL steps: after its two SFT steps."""
EVAL_STEPS = [2, 4]
"""The global steps of its evaluations: after SFT at SFT's last step, after RL at RL's last."""


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_a_record_becomes_stage_slash_key_scalars():
    record = {"stage": "rl", "step": 3, "global_step": 9, "loss": 0.25, "reward_mean": 1, "name": "x", "finite": True}
    assert scalars(record) == {"rl/loss": 0.25, "rl/reward_mean": 1.0}


def test_a_record_is_plotted_at_its_global_step_or_an_older_runs_stage_step():
    assert global_step({"stage": "rl", "step": 3, "global_step": 9}) == 9
    assert global_step({"stage": "rl", "step": 3}) == 3


def test_records_carry_a_global_step_counting_sft_then_rl_steps(tiny_train_config):
    _, records = _train(tiny_train_config, [])
    at = [(r["stage"], r.get("name"), r["step"], r["global_step"]) for r in records]
    assert at == [
        ("sft", None, 1, 1),
        ("sft", None, 2, 2),
        ("eval", "after_sft", 2, 2),
        ("rl", None, 1, 3),
        ("rl", None, 2, 4),
        ("eval", "after_rl", 2, 4),
    ]


def test_final_results_are_named_by_their_path():
    results = {"after_rl": {"mean": {"accuracy": 0.5}, "addition": {"accuracy": 1.0, "n": 4}}, "table": "text"}
    assert final_scalars(results) == {
        "final/after_rl/mean/accuracy": 0.5,
        "final/after_rl/addition/accuracy": 1.0,
        "final/after_rl/addition/n": 4.0,
    }


def test_mlflow_names_spell_out_the_characters_it_refuses():
    assert mlflow_name("eval/pass@1/addition") == "eval/pass_at_1/addition"
    assert mlflow_name("rl/reward_terms/format") == "rl/reward_terms/format"


def test_tensorboard_true_lists_it_among_the_trackers(tiny_train_config):
    assert tiny_train_config().logging.trackers == ["tensorboard"]
    assert tiny_train_config(tensorboard=False).logging.trackers == []
    assert tiny_train_config(logging__trackers=["mlflow"]).logging.trackers == ["tensorboard", "mlflow"]


def test_tensorboard_false_with_tensorboard_listed_is_refused(tiny_train_config):
    with pytest.raises(UserError, match="tensorboard is false"):
        tiny_train_config(tensorboard=False, logging__trackers=["tensorboard"])


def test_an_unknown_tracker_is_refused(tiny_train_config):
    with pytest.raises(UserError, match=r"logging\.trackers\.0"):
        tiny_train_config(logging__trackers=["comet"])


def test_a_tracker_without_its_package_names_the_extra(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(UserError, match=r"pip install 'polyrl\[wandb\]'"):
        open_trackers(LoggingConfig(trackers=["wandb"]), tmp_path, {})


def _train(tiny_train_config, trackers: list[str]) -> tuple[Path, list[dict]]:
    from polyrl.train.trainer import Trainer

    cfg = tiny_train_config(logging__trackers=trackers, logging__project="polyrl-test", **SMALL)
    Trainer(cfg).run()
    run = Path(cfg.run_dir)
    return run, [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _expected_names(records: list[dict]) -> set[str]:
    return {name for r in records for name in scalars(r)}


def test_tensorboard_receives_every_metric_name(tiny_train_config):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run, records = _train(tiny_train_config, [])
    events = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert _expected_names(records) <= tags
    assert "final/after_rl/mean/accuracy" in tags
    tokens = [e.value for e in events.Scalars("rl/tokens")]
    assert tokens == pytest.approx([r["tokens"] for r in records if r["stage"] == "rl"])
    assert [e.step for e in events.Scalars("rl/tokens")] == RL_STEPS
    assert [e.step for e in events.Scalars("eval/accuracy/addition")] == EVAL_STEPS


@pytest.mark.skipif(not _have("trackio"), reason="trackio is not installed (pip install 'polyrl[trackio]')")
def test_trackio_records_metrics_config_and_results(tiny_train_config):
    from trackio.sqlite_storage import SQLiteStorage

    run, records = _train(tiny_train_config, ["trackio"])
    logs = SQLiteStorage.get_logs("polyrl-test", run.name)
    names = {k for row in logs for k in row if "/" in k}
    assert _expected_names(records) <= names
    assert "final/after_rl/mean/accuracy" in names
    rl_tokens = [row["rl/tokens"] for row in logs if "rl/tokens" in row]
    assert rl_tokens == pytest.approx([r["tokens"] for r in records if r["stage"] == "rl"])
    assert [row["step"] for row in logs if "rl/tokens" in row] == RL_STEPS
    assert [row["step"] for row in logs if "eval/accuracy/addition" in row] == EVAL_STEPS
    assert SQLiteStorage.get_run_config("polyrl-test", run.name)["rl"]["steps"] == 2


def _wandb_records(run: Path, timeout: float = 120.0) -> list:
    """The records of an offline W&B run file once W&B's service has written its exit record: ``run.finish()`` can
    return before the service process has flushed the file (seen on a loaded machine: a file without its history)."""
    deadline = time.monotonic() + timeout
    while True:
        records = _read_wandb_file(run)
        if any(rec.WhichOneof("record_type") == "exit" for rec in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def _read_wandb_file(run: Path) -> list:
    """The protobuf records of an offline W&B run file (LevelDB log format: 32 KiB blocks, 7-byte headers)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = glob.glob(str(run / "wandb" / "offline-run-*" / "run-*.wandb"))
    data, pos, chunk, out = Path(path).read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = chunk + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            out.append(pb.Record.FromString(chunk))
            chunk = b""
    return out


@pytest.mark.skipif(not _have("wandb"), reason="wandb is not installed (pip install 'polyrl[wandb]')")
def test_wandb_offline_records_metrics_config_and_results(tiny_train_config):
    run, records = _train(tiny_train_config, ["wandb"])
    history, summary, config = [], {}, {}
    key = lambda item: item.key or "/".join(item.nested_key)  # a name with "/" is stored as a nested key
    for rec in _wandb_records(run):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({key(item): json.loads(item.value_json) for item in rec.history.item})
        elif kind == "summary":
            summary |= {key(item): json.loads(item.value_json) for item in rec.summary.update}
        elif kind == "run":
            config |= {item.key: json.loads(item.value_json) for item in rec.run.config.update}
    names = {k for row in history for k in row}
    assert _expected_names(records) <= names
    rl = [row for row in history if "rl/tokens" in row]
    assert [row["global_step"] for row in rl] == RL_STEPS
    assert [row["global_step"] for row in history if "eval/accuracy/addition" in row] == EVAL_STEPS
    assert [row["rl/tokens"] for row in rl] == pytest.approx([r["tokens"] for r in records if r["stage"] == "rl"])
    assert "final/after_rl/mean/accuracy" in summary
    assert config["rl"]["steps"] == 2


@pytest.mark.skipif(
    not (_have("mlflow") and _have("sqlalchemy")), reason="mlflow is not installed (pip install 'polyrl[mlflow]')"
)
def test_mlflow_local_store_records_metrics_config_and_results(tiny_train_config):
    from mlflow.tracking import MlflowClient

    run, records = _train(tiny_train_config, ["mlflow"])
    client = MlflowClient(tracking_uri=f"sqlite:///{(run / 'mlflow.db').resolve()}")
    experiment = client.get_experiment_by_name("polyrl-test")
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == run.name and found.info.status == "FINISHED"
    assert {mlflow_name(n) for n in _expected_names(records)} <= set(found.data.metrics)
    assert "final/after_rl/mean/accuracy" in found.data.metrics
    history = client.get_metric_history(found.info.run_id, "rl/tokens")
    assert [(m.step, m.value) for m in history] == list(
        zip(RL_STEPS, [r["tokens"] for r in records if r["stage"] == "rl"])
    )
    assert [m.step for m in client.get_metric_history(found.info.run_id, "eval/accuracy/addition")] == EVAL_STEPS
    assert found.data.params["rl.steps"] == "2"
    assert (
        json.loads(Path(client.download_artifacts(found.info.run_id, "config.json", str(run))).read_text())["rl"][
            "steps"
        ]
        == 2
    )


@pytest.mark.skipif(not _have("trackio"), reason="trackio is not installed (pip install 'polyrl[trackio]')")
def test_a_closed_trackio_tracker_prints_nothing_when_the_process_exits(tmp_path):
    """Issue #43: a test run ended by printing "Uploading logs to Trackio": trackio's exit hook finished the run
    polyrl had finished already."""
    script = f"""
from polyrl.trackers import LoggingConfig, open_trackers
(tracker,) = open_trackers(LoggingConfig(trackers=["trackio"], project="polyrl-test"), {str(tmp_path)!r}, {{}})
tracker.log({{"stage": "rl", "step": 1, "global_step": 1, "reward": 0.5}})
tracker.close()
print("CLOSED", flush=True)
"""
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = done.stdout.split("CLOSED", 1)[1]
    assert after.strip() == "" and "Uploading logs" not in done.stderr


def test_the_docs_give_each_tracker_s_name_of_pass_at_k_as_it_logs_it():
    """Issue #43: MLflow shows ``pass_at_k`` where the other trackers show ``pass@k``; docs/training.md says
    which name each tracker has, and this holds it to ``mlflow_name``."""
    doc = (Path(__file__).parents[2] / "docs" / "training.md").read_text()
    rows = dict(line.strip("|").split("|")[:2] for line in doc.splitlines() if "/addition`" in line and "|" in line)
    rows = {where.strip(): name.strip().strip("`") for where, name in rows.items()}
    assert rows == {"TensorBoard, trackio, W&B": "eval/pass@4/addition", "MLflow": mlflow_name("eval/pass@4/addition")}
