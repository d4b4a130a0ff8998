"""Small random-initialised vision-language models of two Hugging Face families, built and saved offline: an
Idefics3 (SmolVLM's architecture) and a Qwen2-VL, each a few layers 32 wide with a small vision tower, and its
processor's files (the tiny character tokenizer with the family's image tokens, a small image
processor's settings and a chat template that takes images), written by the GPU check's own writer
(``benchmarks/gpu/make_vlm.py``: :func:`save_vlm`). What the tests of ``polyrl.policy.hf_vision`` load as
``model.path: <dir>``."""

import sys
from pathlib import Path

from polyrl.policy.tiny import build_tiny_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"))
try:  # the one writer of a VLM's files, the GPU check's (as tests/test_gpu_check_entry_points.py imports it)
    from make_vlm import TEMPLATES, save_vlm
finally:
    sys.path.pop(0)

TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def _tokenizer(special: list[str]):
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": special}, replace_extra_special_tokens=False)
    return tokenizer


def _vocab(tokenizer) -> int:
    return len(tokenizer) + (-len(tokenizer)) % 8


def save_idefics3(path: Path, seed: int = 0) -> Path:
    """A 2-layer Idefics3 with a 1-layer vision tower: 32-pixel pictures of 8-pixel patches, pixel-shuffled by 2
    into 4 image tokens each; saved with its processor at ``path``."""
    from transformers import Idefics3Config

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
    return save_vlm(path, config, tokenizer, side=32, seed=seed)  # 32 pixels on the longest edge


def save_qwen2_vl(path: Path, seed: int = 0, version: str = "2") -> Path:
    """A 2-layer Qwen2-VL (``version`` "2.5": a Qwen2.5-VL) with a 1-layer vision tower of 4-pixel patches merged
    2 × 2: a 16-pixel picture is 4 image tokens; saved with its processor's parts at ``path``."""
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig

    tokenizer = _tokenizer(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<|im_end|>"])
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.chat_template = TEMPLATES["qwen2_vl"]
    ids = tokenizer.convert_tokens_to_ids
    vision = dict(depth=1, num_heads=2, patch_size=4, spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
    if version == "2.5":  # windows of one merged patch, and the one block attends over the whole picture
        vision.update(
            hidden_size=32, intermediate_size=64, out_hidden_size=32, window_size=8, fullatt_block_indexes=[0]
        )
        config_class = Qwen2_5_VLConfig
    else:
        vision.update(embed_dim=32, hidden_size=32, mlp_ratio=2)
        config_class = Qwen2VLConfig
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
    return save_vlm(path, config, tokenizer, side=64, patch_size=4, seed=seed)  # pictures of at most 64 × 64
