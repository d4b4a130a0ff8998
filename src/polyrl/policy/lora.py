"""LoRA adapters through PEFT, configured as PEFT users configure them, loaded to continue training and saved as
PEFT saves them.

``model.lora`` carries the fields of ``peft.LoraConfig`` people set (``r``, ``alpha``, ``dropout``,
``target_modules`` with ``all-linear``, ``modules_to_save``, ``bias``, rsLoRA, DoRA). ``model.lora.adapter`` names an
existing adapter (a directory or a Hub id) whose weights and settings a run continues from. Every model a LoRA run
saves holds the merged checkpoint and, in ``adapter/``, the adapter as ``PeftModel.save_pretrained`` writes it
(``adapter_config.json`` + ``adapter_model.safetensors``), its base named so ``PeftModel.from_pretrained`` finds it.
"""

from __future__ import annotations

import json
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from polyrl.errors import UserError
from polyrl.policy.model_files import check_weight_files, first_nonfinite, one_line

if TYPE_CHECKING:
    from polyrl.policy.resolve import ResolvedModel

ADAPTER_DIR = "adapter"
"""The adapter's folder inside a saved model directory (``final_model/adapter``)."""
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

SHAPE_FIELDS = ("r", "alpha", "dropout", "target_modules", "modules_to_save", "bias", "use_rslora", "use_dora")
"""The ``model.lora`` fields an existing adapter decides (its ``adapter_config.json`` holds them)."""


class LoraConfig(BaseModel):
    """LoRA adapters through PEFT (only the adapters, and ``modules_to_save``, are trained)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="Train LoRA adapters instead of all weights.")
    r: int = Field(16, ge=1, description="Adapter rank.")
    alpha: int = Field(
        32, ge=1, description="Adapter scaling numerator (scale = alpha / r; alpha / sqrt(r) with use_rslora)."
    )
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on adapter inputs.")
    target_modules: list[str] | str = Field(
        "all-linear",
        description="Modules that get adapters: names (q_proj, v_proj, …), a regex, or all-linear (every linear layer but the output head).",
    )
    modules_to_save: list[str] | None = Field(
        None, description="Modules trained in full beside the adapters and saved with them (e.g. [lm_head])."
    )
    bias: Literal["none", "all", "lora_only"] = Field(
        "none", description="Which biases train: none, all, or those of the adapted layers (lora_only)."
    )
    use_rslora: bool = Field(False, description="Rank-stabilized LoRA: scale alpha / sqrt(r) (Kalajdzievski 2023).")
    use_dora: bool = Field(
        False, description="DoRA: train a magnitude per output beside the low-rank direction (Liu et al. 2024)."
    )
    adapter: str | None = Field(
        None,
        description="Continue training an existing PEFT LoRA adapter: its directory (a polyrl model directory's adapter/ too) or a Hub id. Its own settings (r, alpha, target_modules, …) apply and are recorded here.",
    )
    adapter_revision: str | None = Field(
        None, description="Hub adapters: the branch, tag or commit (a run records the commit it loaded)."
    )

    @model_validator(mode="after")
    def _adapter_is_lora(self):
        """An adapter is LoRA: naming one turns LoRA on, unless the config turns it off, which is refused."""
        if self.adapter is not None and not self.enabled:
            if "enabled" in self.model_fields_set:
                raise ValueError("adapter is set but enabled is false: an adapter is LoRA (drop one of them)")
            self.enabled = True
        if self.adapter_revision is not None and self.adapter is None:
            raise ValueError("adapter_revision is set but adapter is not")
        return self


def adapter_directory(path: Path) -> Path:
    """The folder holding ``adapter_config.json``: ``path`` itself, or a polyrl model directory's ``adapter/``."""
    if not (path / ADAPTER_CONFIG).is_file() and (path / ADAPTER_DIR / ADAPTER_CONFIG).is_file():
        return path / ADAPTER_DIR
    return path


def adapter_settings(directory: Path, label: str) -> dict:
    """The :data:`SHAPE_FIELDS` of the LoRA adapter in ``directory`` (``label`` names it in errors), read from its
    ``adapter_config.json``."""
    try:
        saved = json.loads((directory / ADAPTER_CONFIG).read_text())
    except FileNotFoundError:
        raise UserError(f"LoRA adapter {label!r} has no {ADAPTER_CONFIG}: not a PEFT adapter directory") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {directory / ADAPTER_CONFIG}: {one_line(exc)}") from None
    if not isinstance(saved, dict) or saved.get("peft_type") != "LORA":
        kind = saved.get("peft_type") if isinstance(saved, dict) else None
        raise UserError(f"adapter {label!r} is not a LoRA adapter (peft_type {kind!r})")
    targets = saved.get("target_modules")
    return {
        "r": saved.get("r", 8),
        "alpha": saved.get("lora_alpha", 8),
        "dropout": saved.get("lora_dropout", 0.0),
        "target_modules": sorted(targets) if isinstance(targets, list) else targets,
        "modules_to_save": sorted(saved["modules_to_save"]) if saved.get("modules_to_save") else None,
        "bias": saved.get("bias", "none"),
        "use_rslora": bool(saved.get("use_rslora", False)),
        "use_dora": bool(saved.get("use_dora", False)),
    }


def _same(field: str, ours, theirs) -> bool:
    if field in ("target_modules", "modules_to_save") and isinstance(ours, list) and isinstance(theirs, list):
        return sorted(ours) == sorted(theirs)
    return ours == theirs


def with_adapter_settings(config: LoraConfig, settings: dict, label: str) -> LoraConfig:
    """``config`` with the adapter's settings, so that the saved config states what trained. A field the config set
    to another value is refused (the adapter's weights have the adapter's shape)."""
    for field in SHAPE_FIELDS:
        ours = getattr(config, field)
        if field in config.model_fields_set and not _same(field, ours, settings[field]):
            raise UserError(
                f"model.lora.{field} is {ours!r} but the adapter {label!r} has {settings[field]!r}: an adapter "
                f"brings its own settings, drop model.lora.{field}"
            )
    return config.model_copy(update=settings)


@contextmanager
def quiet_peft():
    """PEFT 0.21 asks transformers 5 for ``is_gradient_checkpointing``, which warns that it is deprecated: a
    warning about the libraries' versions that no setting of the user's changes, printed on every LoRA run."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


def add_lora(model, config: LoraConfig):
    """``model`` wrapped by PEFT with fresh adapters as ``config`` describes."""
    try:
        from peft import LoraConfig as PeftLoraConfig
        from peft import get_peft_model
    except ImportError:
        raise UserError("LoRA needs PEFT: pip install 'polyrl[peft]'") from None
    try:
        peft_config = PeftLoraConfig(
            r=config.r,
            lora_alpha=config.alpha,
            lora_dropout=config.dropout,
            target_modules=config.target_modules,
            modules_to_save=config.modules_to_save,
            bias=config.bias,
            use_rslora=config.use_rslora,
            use_dora=config.use_dora,
            task_type="CAUSAL_LM",
        )
        with quiet_peft():
            return get_peft_model(model, peft_config)
    except (ValueError, TypeError, NotImplementedError) as exc:  # PEFT's word for a setting this model cannot take
        raise UserError(f"model.lora: {one_line(exc)}") from None


def load_adapter(model, directory: Path, label: str):
    """``model`` with the trainable LoRA adapter saved in ``directory`` (``label`` names it in errors)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise UserError("LoRA needs PEFT: pip install 'polyrl[peft]'") from None
    adapter_settings(directory, label)  # a LoRA adapter's config, or one line
    if not (directory / ADAPTER_WEIGHTS).is_file():
        raise UserError(f"LoRA adapter {label!r} has no {ADAPTER_WEIGHTS} (polyrl reads safetensors adapters)")
    check_weight_files(directory)
    try:
        with quiet_peft():
            peft_model = PeftModel.from_pretrained(model, str(directory), is_trainable=True)
    except Exception as exc:  # shapes that do not fit the base, unknown modules: PEFT and torch raise many kinds
        raise UserError(f"cannot load the LoRA adapter {label!r} onto this model: {one_line(exc)}") from None
    trained = [(n, p) for n, p in peft_model.named_parameters() if p.requires_grad]
    bad = first_nonfinite(trained)
    if bad is not None:
        raise UserError(f"LoRA adapter {label!r}: weight {bad[0]} holds {bad[1]} NaN or infinite values of {bad[2]}")
    return peft_model


def base_reference(source: ResolvedModel | None) -> tuple[str | None, str | None]:
    """How an adapter's ``adapter_config.json`` names its base (``base_model_name_or_path``, ``revision``): a Hub
    id and its commit, else the absolute directory polyrl loaded (a preset's converted checkpoint, a local model);
    None for the embedded tiny model, which has no files (its config rebuilds it)."""
    if source is None or source.directory is None:
        return None, None
    if source.kind == "hub":
        return source.repo_id, source.commit
    return str(source.directory.resolve()), None


def save_adapter(model, path: Path, source: ResolvedModel | None) -> None:
    """The PEFT adapter of ``model`` in ``path`` (``adapter_config.json`` + ``adapter_model.safetensors``) with its
    base named as :func:`base_reference` says."""
    base, revision = base_reference(source)
    config = model.peft_config[model.active_adapter]
    config.base_model_name_or_path, config.revision = base, revision
    # polyrl never resizes the vocabulary, so the base's embeddings are not saved with the adapter (PEFT's "auto"
    # would fetch the base's config from the Hub to find out)
    model.save_pretrained(str(path), safe_serialization=True, save_embedding_layers=False)
