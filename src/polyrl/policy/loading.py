"""Load a policy: the embedded tiny default, a named real model, a local .gguf file, any local Hugging Face causal
LM or a Hub id (every name through :func:`polyrl.policy.resolve.resolve_model`), optionally with LoRA adapters,
fresh or continued (:mod:`polyrl.policy.lora`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from polyrl.errors import UserError
from polyrl.forward.decoder import IMAGE_MODEL_TYPE, set_forward
from polyrl.forward.pictures import FAMILIES
from polyrl.forward.precision import enable_gradient_checkpointing, resolve_autocast, set_autocast
from polyrl.policy import hf_vision
from polyrl.policy.hf_vision import ImagesConfig
from polyrl.policy.lora import (
    ADAPTER_DIR,
    LoraConfig,
    adapter_directory,
    adapter_settings,
    add_lora,
    load_adapter,
    save_adapter,
    with_adapter_settings,
)
from polyrl.policy.model_files import (
    check_causal,
    check_loading_info,
    check_weight_files,
    first_nonfinite,
    quiet_from_pretrained,
)
from polyrl.policy.resolve import ResolvedModel, resolve_model
from polyrl.policy.tiny import TINY, TinyModelConfig, build_tiny_policy
from polyrl.tasks.base import TEXT_AND_IMAGES, TEXT_ONLY

if TYPE_CHECKING:
    import torch

__all__ = ["TINY", "LoraConfig", "ModelConfig", "Policy", "load_checkpoint", "load_policy", "pin_model"]
TRANSFORMERS_FORWARD_TAKES_NO_IMAGES = (
    "model.forward: transformers cannot take images: the tiny vision-language model runs on polyrl's packed forward "
    "(model.forward: auto)"
)


class ModelConfig(BaseModel):
    """Which policy to train."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(
        TINY,
        description="'tiny' for the embedded default, a named real model (`polyrl models list`), a local .gguf file, a local Hugging Face model directory, or a Hugging Face Hub id ORG/NAME (from the Hub cache, downloaded when missing and the Hub is reachable).",
    )
    revision: str | None = Field(
        None,
        description="Hub ids: the branch, tag or commit to load (default: main). A run records the commit it loaded here, so a rerun of its config.yaml loads the same weights.",
    )
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig, description="Shape of the embedded default.")
    dtype: str = Field(
        "float32",
        description="Weights dtype (also of the optimizer's states): float32, bfloat16 (pure bf16 with autocast none) or float16 (evaluation and serving only: training refuses fp16, which needs a gradient scaler polyrl does not apply).",
    )
    autocast: Literal["auto", "none", "bf16", "fp16"] = Field(
        "auto",
        description="Run forward passes (generation included) under torch.autocast in this precision over the stored weights (float32 + bf16: mixed precision with float32 master weights; fp16: evaluation and serving on CUDA only, training refuses it for want of a gradient scaler); auto: bf16 where it measured faster (a bf16-capable CPU or GPU and a model at least 384 wide), else none.",
    )
    forward: Literal["auto", "packed", "transformers"] = Field(
        "auto",
        description="packed: polyrl's packed forward for Llama-family decoders (llama, qwen2, mistral): no padding through any linear layer, a group's shared prompt computed once, a static KV cache and prepacked bf16 weights in generation (docs/architecture.md); other architectures keep their own. auto: packed on the CPU (where it was measured, docs/benchmarks.md), the model's own forward on GPUs. transformers: the model's own forward everywhere.",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute each layer's activations in the backward instead of storing them (less memory, about one more forward).",
    )
    lora: LoraConfig = Field(default_factory=LoraConfig, description="Optional LoRA adapters.")
    images: ImagesConfig = Field(
        default_factory=ImagesConfig, description="Pictures of a Hugging Face vision-language model (docs/vision.md)."
    )

    @model_validator(mode="after")
    def _images_take_the_packed_forward(self):
        """The tiny model's pictures are embedded by polyrl's packed forward only: refused with the config, before a
        run directory exists."""
        if self.path == TINY and self.tiny.vision.enabled and self.forward == "transformers":
            raise ValueError(TRANSFORMERS_FORWARD_TAKES_NO_IMAGES)
        return self


def merged(model):
    """``model`` as a plain transformers model: a copy with its LoRA adapters merged in (PEFT), or the model
    itself when it has none."""
    if hasattr(model, "merge_and_unload"):
        import copy

        return copy.deepcopy(model).merge_and_unload()
    return model


@dataclass
class Policy:
    """A causal LM, its tokenizer (left padding, a pad token always set) and the device it was put on."""

    model: Any
    tokenizer: Any
    device: Any = None
    """The ``torch.device`` :func:`load_policy` put the weights on (whoever moves them says so here)."""
    source: ResolvedModel | None = None
    """Where the base weights came from (a LoRA adapter names it as its base; a model card too)."""
    modalities: frozenset[str] = TEXT_ONLY
    """What the model takes: text (a causal LM), or text and images (a vision-language model); a run refuses a
    task that shows what it cannot take (:func:`polyrl.tasks.base.check_modalities`)."""
    image_input: Any = None
    """How a vision-language model takes a problem's pictures (``polyrl.policy.tiny_vision.ImageInput``, or
    ``polyrl.policy.hf_vision.HFImageInput`` for a Hugging Face one: what
    :class:`~polyrl.policy.prompts.PromptBuilder` needs to show them); None for a model of text only."""

    def save(self, path: str | Path, adapter: bool = True) -> None:
        """Save as a plain Hugging Face checkpoint (LoRA adapters merged in) and, for a LoRA policy unless
        ``adapter`` is False, the PEFT adapter with the tokenizer in ``path/adapter``."""
        path = Path(path)
        merged(self.model).save_pretrained(path, safe_serialization=True)
        self.tokenizer.save_pretrained(path)
        if hasattr(self.image_input, "save"):  # a Hugging Face VLM's processor, so that the checkpoint reloads
            self.image_input.save(path)
        if adapter and hasattr(self.model, "peft_config"):
            save_adapter(self.model, path / ADAPTER_DIR, self.source)
            self.tokenizer.save_pretrained(path / ADAPTER_DIR)


def check_model_dir(path: str | Path) -> None:
    """Raise UserError unless ``path`` holds a Hugging Face causal LM config."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    p = Path(path)
    if not p.is_dir():
        raise UserError(
            f"model path {str(path)!r} is not a directory (use 'tiny' for the embedded default, "
            "a preset from `polyrl models list` or a .gguf file)"
        )
    cfg_file = p / "config.json"
    if not cfg_file.is_file():
        raise UserError(f"model path {str(path)!r} has no config.json: not a Hugging Face model directory")
    try:
        model_type = json.loads(cfg_file.read_text()).get("model_type")
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {cfg_file}: {exc}") from None
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in (IMAGE_MODEL_TYPE, *FAMILIES):
        raise UserError(f"model at {str(path)!r} (model_type={model_type!r}) is not a causal language model")


def _dtype(name: str):
    import torch

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in table:
        raise UserError(f"unknown dtype {name!r}; use one of {', '.join(table)}")
    return table[name]


def load_checkpoint(path: str, dtype=None):
    """The causal LM and tokenizer in the Hugging Face directory ``path``, every weight read from its files and
    finite; anything else is a one-line UserError (:mod:`polyrl.policy.model_files`)."""
    from transformers import AutoModelForCausalLM

    check_model_dir(path)
    check_weight_files(path)
    if json.loads((Path(path) / "config.json").read_text()).get("model_type") == IMAGE_MODEL_TYPE:
        import polyrl.policy.tiny_vision  # noqa: F401  (registers the tiny vision-language model's classes)
    model, tokenizer, info = quiet_from_pretrained(
        path, AutoModelForCausalLM, dtype=dtype, ignore_mismatched_sizes=True
    )
    check_loading_info(info, path)
    check_finite_weights(model, path)
    check_causal(model, path)
    return model, tokenizer


def pin_model(config: ModelConfig, log=None) -> ModelConfig:
    """``config`` as a run records it: a Hub id's revision as the commit it resolved to (downloaded first when the
    cache lacks it), and an existing adapter's commit and settings (``model.lora``). Every bad name is a UserError
    here, before anything trains."""
    source = resolve_model(config.path, config.revision, log)
    update: dict[str, Any] = {"revision": source.commit} if source.kind == "hub" else {}
    lora = config.lora
    if lora.adapter is not None:
        adapter = resolve_model(lora.adapter, lora.adapter_revision, log)
        settings = adapter_settings(adapter_directory(adapter.directory), lora.adapter)
        lora = with_adapter_settings(lora, settings, lora.adapter)
        if adapter.kind == "hub":
            lora = lora.model_copy(update={"adapter_revision": adapter.commit})
        update["lora"] = lora
    return config.model_copy(update=update)


def load_policy(config: ModelConfig | None = None, seed: int = 0, *, device: torch.device | str) -> Policy:
    """Build or load the policy described by ``config`` on ``device`` (its owner's: the run's placement, or the
    caller that will generate or score with it)."""
    import torch

    config = config or ModelConfig()
    dtype = _dtype(config.dtype)
    source = resolve_model(config.path, config.revision)
    family = hf_vision.model_type(source.directory) if source.directory is not None else None
    if family is not None:
        return _hf_vision_policy(config, source, family, dtype, torch.device(device))
    if source.directory is None and config.tiny.vision.enabled:
        from polyrl.policy.tiny_vision import build_tiny_vlm

        model, tokenizer = build_tiny_vlm(config.tiny, seed=seed)
        model = model.to(dtype)
    elif source.directory is None:
        model, tokenizer = build_tiny_policy(config.tiny, seed=seed)
        model = model.to(dtype)
    else:
        model, tokenizer = _load_base(source, dtype)
    model = _prepared(model, tokenizer, config, device)
    if getattr(model.config, "model_type", None) == IMAGE_MODEL_TYPE:
        return _vision_policy(model.to(device), tokenizer, torch.device(device), config, source)
    return Policy(model.to(device), tokenizer, torch.device(device), source)


def _vision_policy(model, tokenizer, device, config: ModelConfig, source: ResolvedModel) -> Policy:
    """A policy that takes pictures (the tiny vision-language model), on the forward that embeds them."""
    from polyrl.policy.tiny_vision import ImageInput

    if config.forward == "transformers":  # a saved model's config (the tiny one's is refused by the config)
        raise UserError(TRANSFORMERS_FORWARD_TAKES_NO_IMAGES)
    return Policy(model, tokenizer, device, source, TEXT_AND_IMAGES, ImageInput.of(model, tokenizer))


def _hf_vision_policy(config: ModelConfig, source: ResolvedModel, family: str, dtype, device) -> Policy:
    """A Hugging Face vision-language model (``policy/hf_vision.py``) on its own forward, LoRA on its language
    model only."""
    if config.forward == "packed":
        raise UserError(
            f"model.forward: packed cannot run {config.path} ({family}): a Hugging Face vision-language model runs on "
            "its own forward (model.forward: auto or transformers)"
        )
    path = str(source.directory)
    check_weight_files(path)
    model, tokenizer, info = hf_vision.load_vlm(path, family, dtype)
    check_loading_info(info, path)
    check_finite_weights(model, path)
    images = hf_vision.image_input(path, family, model, tokenizer, config.images)
    hf_vision.attach_pictures(model, tokenizer, images)
    lora = config.lora
    if lora.enabled and lora.adapter is None:  # adapters on the language model only
        lora = lora.model_copy(
            update={"target_modules": hf_vision.text_lora_targets(model, family, lora.target_modules)}
        )
    model = _prepared(model, tokenizer, config, device, lora)
    return Policy(model.to(device), tokenizer, device, source, TEXT_AND_IMAGES, images)


def check_finite_weights(model, path: str) -> None:
    """Raise UserError naming the first weight or buffer of the model loaded from ``path`` that holds NaN or inf."""
    bad = first_nonfinite([*model.named_parameters(), *model.named_buffers()])
    if bad is not None:
        name, count, total = bad
        raise UserError(
            f"model at {path!r}: weight {name} holds {count} NaN or infinite values of {total}: "
            "replace the files with an intact copy"
        )


def _prepared(model, tokenizer, config: ModelConfig, device, lora: LoraConfig | None = None):
    """What every policy gets after its weights load: left padding with a pad token, activation checkpointing,
    LoRA (``lora``, config.lora unless given: a continued adapter, or new adapters), autocast and the forward."""
    lora = lora or config.lora
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if lora.adapter is not None:
        adapter = resolve_model(lora.adapter, lora.adapter_revision)
        model = load_adapter(model, adapter_directory(adapter.directory), lora.adapter)
    elif lora.enabled:
        model = add_lora(model, lora)
    set_autocast(model, resolve_autocast(config.autocast, model, device))
    set_forward(model, config.forward)
    return model


def _load_base(source: ResolvedModel, dtype):
    """The checkpoint ``source`` resolved to; a Hub snapshot that fails a check says which id and commit it is."""
    try:
        return load_checkpoint(str(source.directory), dtype)
    except UserError as exc:
        if source.kind != "hub":
            raise
        raise UserError(f"{exc} (the Hub snapshot of {source.repo_id} at commit {source.commit})") from None
