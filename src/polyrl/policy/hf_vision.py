"""Hugging Face vision-language models as policies: the Idefics3 (SmolVLM) and Qwen2-VL (Qwen2.5-VL) families of
image-text-to-text checkpoints, loaded from a directory or the Hub like any ``model.path``.

A checkpoint is recognised by its ``model_type`` (transformers' image-text-to-text models). Its processor's chat
template renders each prompt, each picture a ``{"type": "image"}`` part before the text; the one placeholder the
template writes per picture is expanded as the family's processor expands it (Idefics3: the global-image tokens
around ``image_seq_len`` ``<image>`` tokens; Qwen2-VL: ``<|image_pad|>`` once per merged patch). Every picture is
resized to one fixed square (no image splitting), so a picture is always the same number of image tokens and a
prompt's ids are exact across generation and training. The pictures travel with the ids
(:class:`~polyrl.forward.batch.ImageIds`) and go through the model's own forward (:mod:`polyrl.forward.pictures`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from polyrl.errors import UserError
from polyrl.forward.batch import ImageIds
from polyrl.forward.pictures import FAMILIES, PictureForward
from polyrl.policy.hf_pictures import PROCESSOR_FILE, PicturePreprocessing
from polyrl.policy.model_files import one_line, quiet_from_pretrained

SAVED_RUN_CONFIG = "polyrl_config.yaml"
"""The run's config a polyrl run saves beside each of its models (``train/model_card.py``)."""
QWEN_DEFAULT_PATCHES = 8
"""Qwen2-VL's picture side by default, in merged patches: 8 × 8 = 64 image tokens (224 pixels for 14-pixel patches
merged 2 × 2)."""
TEXT_MODELS = {
    "idefics3": "model.text_model",
    "qwen2_vl": "model.language_model",
    "qwen2_5_vl": "model.language_model",
}
"""Where each family keeps its language model, the part LoRA adapts."""
VISION_TOKENS = {
    "idefics3": ("<image>", "<fake_token_around_image>", "<global-img>"),
    "qwen2_vl": ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"),
    "qwen2_5_vl": ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"),
}
"""Tokens that only ever stand around pictures: the policy never samples them."""
PLACEHOLDERS = {"idefics3": "<image>", "qwen2_vl": "<|image_pad|>", "qwen2_5_vl": "<|image_pad|>"}
"""What the family's chat template writes for one picture."""


class ImagesConfig(BaseModel):
    """How a Hugging Face vision-language model is shown pictures."""

    model_config = ConfigDict(extra="forbid")

    size: int | None = Field(
        None,
        ge=1,
        description="Hugging Face vision-language models: side, in pixels, every picture is resized to (a square, no image splitting), which fixes its image tokens. Default: Idefics3/SmolVLM its vision encoder's input size; Qwen2-VL the size a polyrl run trained the model with, else 8 merged patches (224 for 14-pixel patches: 64 image tokens); any multiple of patch_size × merge_size.",
    )
    max_per_prompt: int = Field(
        4, ge=1, description="Most pictures one prompt may show; a problem with more is refused in one line."
    )


def model_type(path: str | Path) -> str | None:
    """The ``model_type`` of the checkpoint directory ``path`` when it is a vision-language model polyrl drives,
    else None. An image-text-to-text model of another family is a UserError, unless transformers also loads its type
    as a causal LM (Gemma 3, Llama 4…): that one loads as before, taking text only."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    try:
        kind = json.loads((Path(path) / "config.json").read_text()).get("model_type")
    except (OSError, ValueError):
        return None  # check_model_dir says what is wrong with it
    if kind in FAMILIES:
        return kind
    if kind not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES or kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return None
    raise UserError(
        f"model at {str(path)!r} is a {kind} vision-language model; polyrl drives the families "
        f"{', '.join(FAMILIES)} (docs/vision.md)"
    )


@dataclass(frozen=True)
class HFImageInput:
    """How a Hugging Face vision-language policy takes a problem's pictures: each resized to ``size`` × ``size``
    RGB and shown as ``tokens`` image tokens, the prompt rendered by the processor's chat ``template``."""

    family: str
    token: str
    """The image token, ``tokens`` of which stand for one picture."""
    token_id: int
    tokens: int
    size: int
    max_images: int
    template: str
    expansion: str
    """What one picture's placeholder in the rendered template becomes."""
    image_processor: PicturePreprocessing
    processor: Any = None
    """The checkpoint's processor where transformers can build it (saved beside the model), else None."""

    @property
    def placeholder(self) -> str:
        """What the family's chat template writes for one picture."""
        return PLACEHOLDERS[self.family]

    def placeholders(self, count: int) -> str:
        """The text that stands for ``count`` pictures, already expanded (an episode's observation)."""
        return self.expansion * count

    def chat_text(self, tokenizer, messages: list[dict], pictures: int, **kwargs) -> str:
        """``messages`` (the user message's pictures not yet in it) rendered by the processor's template with
        ``pictures`` image parts opening the last user message, each expanded to its image tokens."""
        shown = []
        for i, message in enumerate(messages):
            parts = [{"type": "text", "text": message["content"]}]
            if message["role"] == "user" and i == len(messages) - 1:
                parts = [{"type": "image"}] * pictures + parts
            shown.append({"role": message["role"], "content": parts})
        text = tokenizer.apply_chat_template(
            shown, chat_template=self.template, tokenize=False, add_generation_prompt=True, **kwargs
        )
        return self.expand(text, pictures)

    def expand(self, text: str, pictures: int) -> str:
        """``text`` with each picture's placeholder expanded; a template that shows another count is a UserError."""
        if text.count(self.placeholder) != pictures:
            raise UserError(
                f"the chat template wrote {text.count(self.placeholder)} image placeholders "
                f"{self.placeholder!r} for {pictures} pictures"
            )
        return text.replace(self.placeholder, self.expansion) if pictures else text

    def check_count(self, problem) -> None:
        """A UserError when ``problem`` shows more pictures than ``model.images.max_per_prompt``."""
        if len(problem.images) > self.max_images:
            raise UserError(
                f"{problem.task} problem {problem.split}/{problem.seed} shows {len(problem.images)} pictures, more "
                f"than model.images.max_per_prompt ({self.max_images})"
            )

    def pixels(self, images):
        """``uint8 [n, size, size, 3]`` of PIL RGB images (box-filter resizing)."""
        import numpy as np
        import torch
        from PIL import Image

        side = (self.size, self.size)
        resized = [im if im.size == side else im.convert("RGB").resize(side, Image.BOX) for im in images]
        return torch.from_numpy(np.stack([np.asarray(im.convert("RGB"), dtype=np.uint8) for im in resized]))

    def prompt(self, ids: list[int], images) -> ImageIds:
        """``ids`` (with the image tokens of ``images`` in them) carrying the pictures' pixels and their digest."""
        pixels = self.pixels(images)
        found = sum(1 for t in ids if t == self.token_id)
        if found != self.tokens * len(images):
            raise UserError(f"a prompt holds {found} image tokens for {len(images)} pictures of {self.tokens} each")
        return ImageIds(ids, pixels, hashlib.sha256(pixels.numpy().tobytes()).digest())

    def save(self, path: Path) -> None:
        """Save what the checkpoint needs beside its weights to take pictures again: the processor (or the image
        processor and the chat template when transformers cannot build the processor)."""
        if self.processor is not None:
            self.processor.save_pretrained(path)
            return
        self.image_processor.save_pretrained(path)
        (Path(path) / "chat_template.jinja").write_text(self.template)


def _processor(path: str):
    """The checkpoint's processor, or None where transformers cannot build it (a Qwen2-VL processor also needs a
    video processor, and some transformers versions' Idefics3 image processors, torchvision): its settings and
    chat template are then read from its files."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(path)
    except Exception:  # whatever a processor's optional parts raise when their dependencies are missing
        return None


def _saved_template(path: str) -> str | None:
    """The chat template saved at ``path`` beside a processor (``chat_template.jinja`` or ``.json``), if any."""
    try:
        return (Path(path) / "chat_template.jinja").read_text()
    except OSError:
        pass
    try:
        return json.loads((Path(path) / "chat_template.json").read_text()).get("chat_template")
    except (OSError, ValueError, AttributeError):
        return None


def _template(path: str, processor, tokenizer) -> tuple[str, str]:
    """The processor's chat template, and what it renders for a user message of one picture and some text."""
    template = getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None)
    template = template or _saved_template(path)
    if isinstance(template, dict):
        template = template.get("default")
    if not template:
        raise UserError(f"model at {path!r}: its processor has no chat template (polyrl renders prompts with it)")
    probe = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}]
    try:
        text = tokenizer.apply_chat_template(probe, chat_template=template, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # a Jinja template raises anything
        raise UserError(f"model at {path!r}: its chat template cannot render a picture: {one_line(exc)}") from None
    return template, text


def image_input(path: str, family: str, model, tokenizer, config: ImagesConfig) -> HFImageInput:
    """The image input of the checkpoint at ``path``: its processor's template, its fixed picture size and the
    image tokens one picture takes; a checkpoint whose processor lacks something is a UserError."""
    processor = _processor(path)
    images = PicturePreprocessing.from_pretrained(path, family)
    template, probe = _template(path, processor, tokenizer)
    if probe.count(PLACEHOLDERS[family]) != 1:
        raise UserError(
            f"model at {path!r}: its chat template does not take images (no {PLACEHOLDERS[family]!r} for a picture)"
        )
    if family == "idefics3":
        size, tokens, expansion = _idefics3_shape(path, model, processor, images, config)
    else:
        size, tokens, expansion = _qwen_shape(path, images, config)
    token = PLACEHOLDERS[family]
    token_id = tokenizer.convert_tokens_to_ids(token)
    if token_id != model.config.image_token_id:
        raise UserError(f"model at {path!r}: the tokenizer's {token!r} is not the model's image_token_id")
    shape = (tokens, size, config.max_per_prompt, template, expansion, images, processor)
    return HFImageInput(family, token, token_id, *shape)


def _idefics3_shape(path: str, model, processor, images, config: ImagesConfig) -> tuple[int, int, str]:
    vision = model.config.vision_config
    size = vision.image_size
    if config.size not in (None, size):
        raise UserError(
            f"model.images.size {config.size}: an Idefics3 model encodes pictures at its vision encoder's size {size}"
        )
    tokens = int((size // vision.patch_size) ** 2 / model.config.scale_factor**2)
    seq_len = getattr(processor, "image_seq_len", None) or images.files.get(PROCESSOR_FILE, {}).get("image_seq_len")
    seq_len = seq_len or tokens
    if seq_len != tokens:
        raise UserError(f"model at {path!r}: the processor's image_seq_len {seq_len} is not the model's {tokens}")
    return size, tokens, "<fake_token_around_image><global-img>" + "<image>" * tokens + "<fake_token_around_image>"


def _trained_size(path: str) -> int | None:
    """The picture side a polyrl run trained the checkpoint at ``path`` with (``model.images.size`` of the run's
    config, saved beside its models as ``polyrl_config.yaml``), so that a saved model sees pictures as it learned
    them; None for any other checkpoint."""
    import yaml

    from polyrl.yaml_files import safe_load

    try:
        saved = safe_load((Path(path) / SAVED_RUN_CONFIG).read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None
    size = (((saved or {}).get("model") or {}).get("images") or {}).get("size") if isinstance(saved, dict) else None
    return size if isinstance(size, int) and size > 0 else None


def _qwen_shape(path: str, images, config: ImagesConfig) -> tuple[int, int, str]:
    step = images.patch_size * images.merge_size
    size = config.size or _trained_size(path) or step * QWEN_DEFAULT_PATCHES
    if size % step:
        raise UserError(f"model.images.size {size} is not a multiple of {step} (patch_size × merge_size)")
    tokens = (size // step) ** 2
    return size, tokens, "<|image_pad|>" * tokens


def load_vlm(path: str, family: str, dtype):
    """The model and tokenizer of the vision-language checkpoint ``path``."""
    from transformers import AutoModelForImageTextToText

    # no Hub kernels: they would swap the model's layers (fetching code from the Hub) under polyrl's forward
    return quiet_from_pretrained(path, AutoModelForImageTextToText, dtype=dtype, use_kernels=False)


def attach_pictures(model, tokenizer, images: HFImageInput) -> None:
    """Make ``model`` take ``images``' pictures on its own forward and never sample a vision token."""
    vocab = tokenizer.get_vocab()
    blocked = [vocab[t] for t in VISION_TOKENS[images.family] if t in vocab]
    PictureForward(images.family, images.image_processor, images.token_id, images.size).attach(model, blocked)


def text_lora_targets(model, family: str, targets: list[str] | str) -> str:
    """``model.lora.target_modules`` resolved inside the language model: a regex of the linear layers under the
    family's text model whose names are ``targets`` (``all-linear``: every one)."""
    from torch import nn

    prefix = TEXT_MODELS[family]
    if isinstance(targets, str) and targets != "all-linear":
        return rf"{re.escape(prefix)}\.(?:{targets})"  # a regex of the user's, kept inside the text model
    names = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if name.startswith(prefix + ".") and isinstance(module, nn.Linear)
    }
    if targets != "all-linear":
        names &= set(targets)
    if not names:
        raise UserError(f"model.lora.target_modules {targets!r}: no linear layer of that name in the language model")
    return rf"{re.escape(prefix)}\..*\.(?:{'|'.join(sorted(names))})"
