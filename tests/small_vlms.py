"""Small random-initialised vision-language models of two Hugging Face families, built and saved offline: an
Idefics3 (SmolVLM's architecture) and a Qwen2-VL, each a few layers 32 wide with a small vision tower, and its
processor's files (the tiny character tokenizer with the family's image tokens, a small image
processor's settings and a chat template that takes images). What the tests of ``polyrl.policy.hf_vision`` load
as ``model.path: <dir>``."""

import json
from pathlib import Path

import torch

from polyrl.policy.tiny import build_tiny_tokenizer

IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
"""SmolVLM-Instruct's template, in its shape: each picture one ``<image>`` the processor expands."""
QWEN2_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen2-VL-Instruct's template, in its shape: each picture ``<|vision_start|><|image_pad|><|vision_end|>``."""
TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def _tokenizer(special: list[str]):
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": special}, replace_extra_special_tokens=False)
    return tokenizer


def _write_json(path: Path, content: dict) -> None:
    (path / content.pop("file")).write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")


IMAGE_SETTINGS = dict(do_convert_rgb=True, do_normalize=True, do_rescale=True, do_resize=True, rescale_factor=1 / 255)
IDEFICS3_PROCESSOR = {
    "file": "processor_config.json",
    "image_processor": dict(
        IMAGE_SETTINGS,
        image_processor_type="Idefics3ImageProcessor",
        do_image_splitting=False,
        do_pad=True,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
        max_image_size={"longest_edge": 32},
        size={"longest_edge": 32},
        resample=1,
    ),
    "image_seq_len": 4,
    "processor_class": "Idefics3Processor",
}
"""The processor settings transformers 5.25 saves for the small Idefics3, written as JSON: some transformers
versions cannot build its image processor without torchvision, and polyrl reads the settings itself."""
QWEN2_VL_PREPROCESSOR = dict(
    IMAGE_SETTINGS,
    file="preprocessor_config.json",
    image_processor_type="Qwen2VLImageProcessor",
    image_mean=[0.48145466, 0.4578275, 0.40821073],
    image_std=[0.26862954, 0.26130258, 0.27577711],
    patch_size=4,
    merge_size=2,
    temporal_patch_size=2,
    size={"shortest_edge": 16 * 16, "longest_edge": 64 * 64},
    resample=3,
)
"""The small Qwen2-VL's image processor settings (4-pixel patches merged 2 × 2), as JSON for the same reason."""


def _vocab(tokenizer) -> int:
    return len(tokenizer) + (-len(tokenizer)) % 8


def save_idefics3(path: Path, seed: int = 0) -> Path:
    """A 2-layer Idefics3 with a 1-layer vision tower: 32-pixel pictures of 8-pixel patches, pixel-shuffled by 2
    into 4 image tokens each; saved with its processor at ``path``."""
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    tokenizer = _tokenizer(["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"])
    tokenizer.eos_token = "<end_of_utterance>"
    config = Idefics3Config(
        text_config=dict(
            model_type="llama",
            vocab_size=_vocab(tokenizer),
            max_position_embeddings=512,
            **TEXT,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Idefics3ForConditionalGeneration(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    _write_json(Path(path), dict(IDEFICS3_PROCESSOR))
    (Path(path) / "chat_template.jinja").write_text(IDEFICS3_TEMPLATE)
    return path


def save_qwen2_vl(path: Path, seed: int = 0, version: str = "2") -> Path:
    """A 2-layer Qwen2-VL (``version`` "2.5": a Qwen2.5-VL) with a 1-layer vision tower of 4-pixel patches merged
    2 × 2: a 16-pixel picture is 4 image tokens; saved with its processor's parts at ``path``."""
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
    )

    tokenizer = _tokenizer(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<|im_end|>"])
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.chat_template = QWEN2_VL_TEMPLATE
    ids = tokenizer.convert_tokens_to_ids
    vision = dict(depth=1, num_heads=2, patch_size=4, spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
    if version == "2.5":  # windows of one merged patch, and the one block attends over the whole picture
        vision.update(
            hidden_size=32, intermediate_size=64, out_hidden_size=32, window_size=8, fullatt_block_indexes=[0]
        )
        config_class, model_class = Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    else:
        vision.update(embed_dim=32, hidden_size=32, mlp_ratio=2)
        config_class, model_class = Qwen2VLConfig, Qwen2VLForConditionalGeneration
    config = config_class(
        text_config=dict(
            vocab_size=_vocab(tokenizer),
            max_position_embeddings=512,
            **TEXT,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 10000.0},
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=vision,
        image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"),
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = model_class(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)  # with the template: transformers builds a Qwen2-VL processor only with a video
    _write_json(Path(path), dict(QWEN2_VL_PREPROCESSOR))  # processor, which needs torchvision; polyrl reads the parts
    return path
