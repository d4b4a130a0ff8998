"""The embedded tiny vision-language model: a small patch encoder in front of the embedded tiny Llama.

A picture is resized to ``image_size`` × ``image_size`` RGB, cut into ``patch_size`` squares by one strided
convolution (a linear map of each square's pixels), given a learned position per square and read by
``vision_layers`` pre-norm transformer blocks; each square's output, projected to the LM's width, is the embedding
of one image placeholder token of the prompt (``(image_size / patch_size)²`` of them per picture, in the order the
squares are read, row by row). The LM never predicts a placeholder: its logit is held at :data:`BLOCKED_LOGIT`, so
generation never samples one and a response never holds one.

The model is a ``LlamaForCausalLM`` subclass of its own ``model_type`` (:data:`IMAGE_MODEL_TYPE`), registered with
transformers' auto classes when this module is imported, so that it saves with ``save_pretrained`` and loads back
with ``AutoModelForCausalLM.from_pretrained``. It takes pictures on polyrl's packed forward only
(``forward/decoder.py``, :meth:`~polyrl.forward.decoder.Decoder.embed`); its own ``forward`` refuses placeholder
tokens, so a path that would drop the pictures raises instead.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from polyrl.forward.batch import ImageIds
from polyrl.forward.decoder import IMAGE_MODEL_TYPE
from polyrl.policy.tiny import TinyModelConfig, build_tiny_tokenizer, tiny_llama_config

IMAGE_TOKEN = "<image>"
BLOCKED_LOGIT = -1e4
"""The placeholder token's logit: ``exp(-1e4 - max)`` is 0 in every float type, and finite (no 0 · inf in an
entropy), in float16 and bfloat16 too."""


class TinyVLMConfig(LlamaConfig):
    """A Llama config with the patch encoder's shape and the placeholder token."""

    model_type = IMAGE_MODEL_TYPE
    # the shape comes from TinyVisionConfig (build_tiny_vlm) or from a saved config.json, never from here
    image_token_id: int | None = None
    image_size: int | None = None
    patch_size: int | None = None
    vision_layers: int | None = None
    vision_heads: int | None = None

    @property
    def image_tokens(self) -> int:
        """Placeholder tokens per picture."""
        return (self.image_size // self.patch_size) ** 2


class EncoderBlock(nn.Module):
    """A pre-norm transformer block over a picture's squares (plain attention, every square sees every square)."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x: Tensor) -> Tensor:
        n, squares, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, squares, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
        attended = torch.matmul(probs, v).transpose(1, 2).reshape(n, squares, width)
        x = x + self.out(attended)
        return x + self.mlp(self.norm2(x))


class PatchEncoder(nn.Module):
    """``uint8 [n, S, S, 3]`` pictures to ``[n, (S / patch)², hidden]`` placeholder embeddings."""

    def __init__(self, config: TinyVLMConfig):
        super().__init__()
        width = config.hidden_size
        self.patches = nn.Conv2d(3, width, kernel_size=config.patch_size, stride=config.patch_size)
        self.position = nn.Parameter(torch.randn(config.image_tokens, width) * 0.02)
        self.blocks = nn.ModuleList(EncoderBlock(width, config.vision_heads) for _ in range(config.vision_layers))
        self.norm = nn.LayerNorm(width)
        self.project = nn.Linear(width, width)

    def forward(self, images: Tensor) -> Tensor:
        # ink, not light: a white background is 0, so a square with nothing drawn in it is the convolution's bias
        x = 1.0 - images.permute(0, 3, 1, 2).to(self.patches.weight.dtype) / 255.0
        x = self.patches(x).flatten(2).transpose(1, 2) + self.position
        for block in self.blocks:
            x = block(x)
        return self.project(self.norm(x))


def _block_placeholder(head: nn.Module, args, logits: Tensor) -> Tensor:
    """Forward hook of the LM head: the placeholder token is never predicted. Its index is made once per device
    (a CUDA graph's capture then allocates nothing)."""
    index = head.blocked_index.get(logits.device)
    if index is None:
        index = head.blocked_index[logits.device] = torch.tensor([head.blocked_token], device=logits.device)
    return logits.index_fill(-1, index, BLOCKED_LOGIT)


class TinyVLMForCausalLM(LlamaForCausalLM):
    """The tiny Llama with a :class:`PatchEncoder` (``vision``) whose outputs replace the placeholders' embeddings."""

    config_class = TinyVLMConfig

    def __init__(self, config: TinyVLMConfig):
        super().__init__(config)
        self.vision = PatchEncoder(config)
        self.lm_head.blocked_token = config.image_token_id
        self.lm_head.blocked_index = {}
        self.lm_head.register_forward_hook(_block_placeholder)

    def forward(self, input_ids=None, *args, images: Tensor | None = None, **kwargs):
        """The Llama forward; ``images`` (``uint8 [n, S, S, 3]``) are the pictures of ``input_ids``' placeholders in
        reading order (row by row), embedded as the packed forward embeds them. The FSDP learner scores with this
        forward (its shards cannot take the packed one); placeholders without their pictures are refused."""
        if images is not None:  # PEFT passes inputs_embeds=None along
            kwargs["inputs_embeds"] = self._embed_pictures(input_ids, images)
            return super().forward(None, *args, **kwargs)
        if input_ids is not None and bool((input_ids == self.config.image_token_id).any()):
            raise ValueError(
                "the tiny vision-language model takes pictures on polyrl's packed forward only (model.forward: auto)"
            )
        return super().forward(input_ids, *args, **kwargs)

    def _embed_pictures(self, input_ids: Tensor, images: Tensor) -> Tensor:
        x = self.model.embed_tokens(input_ids)
        where = (input_ids == self.config.image_token_id).unsqueeze(-1)
        pictures = self.vision(images).to(x.dtype)
        if pictures.shape[0] * pictures.shape[1] != int(where.sum()):
            raise ValueError(f"{int(where.sum())} image placeholder tokens for {pictures.shape[0]} pictures")
        return x.masked_scatter(where, pictures)


AutoConfig.register(IMAGE_MODEL_TYPE, TinyVLMConfig)
AutoModelForCausalLM.register(TinyVLMConfig, TinyVLMForCausalLM)


def build_tiny_vlm(config: TinyModelConfig, seed: int = 0):
    """A freshly initialised (model, tokenizer) pair of the tiny vision-language model; weights depend only on
    ``seed`` (the LM first, then the encoder, from one generator)."""
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_tokens([IMAGE_TOKEN], special_tokens=True)
    vision = config.vision
    hf_config = TinyVLMConfig(
        **tiny_llama_config(config, tokenizer),
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        image_size=vision.image_size,
        patch_size=vision.patch_size,
        vision_layers=vision.layers,
        vision_heads=vision.heads,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = TinyVLMForCausalLM(hf_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


@dataclass(frozen=True)
class ImageInput:
    """How a vision-language policy takes a problem's pictures: each resized to ``size`` × ``size`` RGB and shown
    as ``tokens`` placeholder tokens ``token`` at the start of the user message."""

    token: str
    tokens: int
    size: int

    @classmethod
    def of(cls, model, tokenizer) -> ImageInput | None:
        """The image input of ``model`` (PEFT-wrapped too), None for a model that takes text only."""
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = base.config
        if config.model_type != IMAGE_MODEL_TYPE:
            return None
        token = tokenizer.convert_ids_to_tokens(config.image_token_id)
        return cls(token, config.image_tokens, config.image_size)

    def placeholders(self, count: int) -> str:
        """The text that stands for ``count`` pictures."""
        return (self.token * self.tokens + "\n") * count

    def pixels(self, images) -> Tensor:
        """``uint8 [n, size, size, 3]`` of PIL RGB images (box-filter resizing: each output pixel the mean of the
        input pixels it covers, so a thin line never vanishes)."""
        import numpy as np
        from PIL import Image

        resized = [
            im if im.size == (self.size, self.size) else im.resize((self.size,) * 2, Image.BOX) for im in images
        ]
        return torch.from_numpy(np.stack([np.asarray(im.convert("RGB"), dtype=np.uint8) for im in resized]))

    def prompt(self, ids: list[int], images) -> ImageIds:
        """``ids`` (with the placeholders of ``images`` in them) carrying the pictures' pixels and their digest."""
        pixels = self.pixels(images)
        return ImageIds(ids, pixels, hashlib.sha256(pixels.numpy().tobytes()).digest())
