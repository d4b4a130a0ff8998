"""The run's ``config.yaml`` on a fresh start and on ``--resume``.

Every model a config names by Hub id (the policy, an adapter to continue, a reward model, a local judge) is
resolved before anything else (:func:`pin_models`), and the commit it resolved to is what ``config.yaml`` records,
so that a rerun or a resume loads the same weights however the Hub's branches move.

A resumed run may be given overrides (``polyrl train --resume RUN rl.steps=40 rl.lr=1e-4``). They are applied,
and recorded: ``config.yaml`` then holds the values the run goes on with, and its ``resumes`` list says what
each resume changed and the checkpoint (stage, step) it took effect at, so the file never claims a run was made
with settings it was not (docs/training.md, "Resuming with overrides").
"""

from __future__ import annotations

from typing import Any

from polyrl.errors import UserError
from polyrl.policy.loading import pin_model
from polyrl.policy.resolve import resolve_model
from polyrl.run_dir import ResumeRecord, RunDir
from polyrl.train.checkpoint import Checkpoint, weights_mismatch
from polyrl.train.config import TrainConfig, load_config, save_config

_NOT_SETTINGS = {"run_dir", "resumes"}
"""Where a run is, and its resume history: not settings a resume can change."""


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def changed_settings(saved: TrainConfig, config: TrainConfig) -> dict[str, Any]:
    """Dotted keys whose value in ``config`` differs from ``saved``, with their new values."""
    before = _flat(saved.model_dump(mode="json", exclude=_NOT_SETTINGS))
    after = _flat(config.model_dump(mode="json", exclude=_NOT_SETTINGS))
    return {k: v for k, v in after.items() if before.get(k, object()) != v}


def pin_models(config: TrainConfig, log=None) -> TrainConfig:
    """``config`` with every model it names resolved (Hub ids from the cache, or downloaded first) and the commits
    recorded: ``model.revision``, ``model.lora.adapter_revision`` (and the adapter's settings),
    ``reward.reward_model_source.revision``, ``reward.judge_source.revision`` (a local judge). A name that leads
    nowhere is a UserError here, before the run directory is touched."""
    reward = config.reward
    update = {}
    rm = reward.reward_model_source
    if rm is not None:
        found = resolve_model(rm.path, rm.revision, log)
        if found.kind == "hub":
            update["reward_model_source"] = rm.model_copy(update={"revision": found.commit})
    judge = reward.judge_source
    if judge is not None and judge.backend == "local":
        found = resolve_model(judge.model, judge.revision, log)
        if found.kind == "hub":
            update["judge_source"] = judge.model_copy(update={"revision": found.commit})
    pinned = {"model": pin_model(config.model, log)}
    if update:
        pinned["reward"] = reward.model_copy(update=update)
    return config.model_copy(update=pinned)


_MODEL_NAME = ("model.path", "model.revision")
"""The keys that say which model a run trains (a Hub id's revision too: :func:`pin_models` makes it a commit)."""


def without_effect(changed: dict[str, Any], ckpt: Checkpoint) -> list[str]:
    """The changed keys a resume from ``ckpt`` could only record, not apply (issue #43): ``model.path`` and
    ``model.revision`` — the run goes on from the checkpoint's weights, and another model's architecture or
    tokenizer under them would be another run — and every ``sft.`` setting once SFT is over (its model is
    ``sft_model/``)."""
    past_sft = ckpt.stage != "sft"
    return [k for k in changed if k in _MODEL_NAME or (past_sft and k.startswith("sft."))]


def check_resume(config: TrainConfig, run_dir: RunDir, ckpt: Checkpoint, model) -> None:
    """Refuse, before anything is written, a resume whose overrides could not take effect from ``ckpt``
    (:func:`without_effect`) or whose model cannot take ``ckpt``'s weights (an override changed its shape:
    hidden size, layers, LoRA rank…): ``config.yaml`` and its resume history keep describing the run as it is, so
    the next plain ``--resume`` goes on from ``ckpt``."""
    changed = changed_settings(load_config(run_dir.config_file, saved=True), config)
    idle = without_effect(changed, ckpt)
    if idle:
        raise UserError(
            f"cannot resume {run_dir.path} from checkpoint {ckpt.path.name} with {', '.join(idle)} changed: "
            f"{_why_idle(idle, ckpt)}; resume without {'it' if len(idle) == 1 else 'them'}, or start a new run in "
            "another run_dir"
        )
    problem = weights_mismatch(model, ckpt.path / "model", f"checkpoint {ckpt.path.name}")
    if problem is None:
        return
    changed = [k for k in changed if k.startswith("model.")]
    why = f"this resume changes {', '.join(changed)}" if changed else "the model is not the one the run trained"
    raise UserError(
        f"cannot resume {run_dir.path} from checkpoint {ckpt.path.name}: {problem}; {why}: resume without "
        "changing the model's shape, or start a new run in another run_dir"
    )


def _why_idle(keys: list[str], ckpt: Checkpoint) -> str:
    reasons = []
    if any(k in _MODEL_NAME for k in keys):
        reasons.append(f"the run goes on from the weights of {ckpt.path.name}, not from another model")
    if any(k.startswith("sft.") for k in keys):
        reasons.append(
            f"SFT is over ({ckpt.path.name} is an {ckpt.stage.upper()} checkpoint; its model is sft_model/)"
        )
    return " and ".join(reasons)


def save_run_config(config: TrainConfig, run_dir: RunDir, resume: bool, ckpt: Checkpoint | None = None) -> TrainConfig:
    """Save ``config`` as the run's config (a fresh run), or record how it differs from the saved one (a
    resume from ``ckpt``, None when the run had written no checkpoint yet). Returns the config as saved."""
    if not resume:
        save_config(config, run_dir.config_file)
        return config
    saved = load_config(run_dir.config_file, saved=True)
    changed = changed_settings(saved, config)
    if not changed:
        return config
    record = ResumeRecord(stage=ckpt.stage if ckpt else "none", step=ckpt.step if ckpt else 0, overrides=changed)
    recorded = config.model_copy(update={"resumes": [*saved.resumes, record]})
    save_config(recorded, run_dir.config_file)
    return recorded
