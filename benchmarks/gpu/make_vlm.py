"""A Hugging Face vision-language model directory of a real VLM's shape, made from a config in this folder with
random weights: no download (the GPU check's ``vlm`` part; ``benchmarks/vlm_check.py``).

    python benchmarks/gpu/make_vlm.py SHAPE OUT [--device cuda] [--layers N] [--vision-layers N] [--small]

SHAPE is a folder beside this file holding a ``config.json`` written from the model's Hub card:

- ``smolvlm-256m``: SmolVLM-256M-Instruct (an Idefics3: SmolLM2-135M's language model, 576 wide and 30 layers,
  behind SigLIP-base-patch16-512's 12-block vision tower; a 512-pixel picture is 64 image tokens after the 4 × 4
  pixel shuffle), with SmolLM2's tokenizer (``smollm2-135m/``) and the Idefics3 image tokens added so that
  ``<image>`` is SmolVLM's id 49190, its processor (no image splitting, ``image_seq_len`` 64) and SmolVLM-Instruct's
  chat template.
- ``qwen2-vl-2b``: Qwen2-VL-2B-Instruct (1536 wide, 28 layers; a 32-block vision tower 1280 wide, 14-pixel patches
  merged 2 × 2), with polyrl's tiny character tokenizer and Qwen2-VL's vision tokens (Qwen's tokenizer is not here;
  the config's token ids are set to the tokenizer's, the vocabulary stays 151,936 rows), its image processor and a
  chat template of Qwen2-VL-Instruct's shape. ``--layers``/``--vision-layers`` keep that many of its decoder layers
  and vision blocks (the check: 4 and 4, a small Qwen2-VL of the real widths).

The random weights (seeded, float32) are made on ``--device`` and saved as ``model.safetensors``, so that polyrl
loads the directory as it would a checkpoint. ``--small`` keeps the family, the vocabulary and the image tokens at a
CPU test's width (:data:`SMALL`: a few image tokens a picture).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
IDEFICS3_TOKENS = ["<global-img>", *[f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]]
IDEFICS3_TOKENS += ["<fake_token_around_image>", "<image>", "<end_of_utterance>"]
"""Added to SmolLM2's 49,152 tokens in this order, ``<image>`` lands on SmolVLM's id 49190 (the row/column tokens
of image splitting are only placeholders here: pictures are never split)."""
QWEN2_VL_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>", "<|im_end|>"]
TEMPLATES = {
    "idefics3": (
        "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
        "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
        "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
        "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
        "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
    ),
    "qwen2_vl": (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
        "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
        "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
        "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
}
"""SmolVLM-Instruct's chat template, and one of Qwen2-VL-Instruct's shape (without its default system message)."""
SMALL = {
    "idefics3": (
        {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16},
        {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
         "image_size": 128},
    ),
    "qwen2_vl": (
        {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2,
         "rope_parameters": {"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1000000.0}},
        {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2},
    ),
}  # fmt: skip
"""``--small``: (text, vision) settings of each family at a CPU test's width; 128-pixel pictures of 16-pixel patches
(Idefics3: 4 image tokens), 56-pixel ones of 14-pixel patches (Qwen2-VL: 4)."""
PICTURE_SIDE = {"qwen2_vl": (224, 56)}
"""Qwen2-VL's picture side in the check and at ``--small`` (Idefics3 takes its vision encoder's size): 224 pixels
are 8 × 8 merged patches, 64 image tokens (polyrl's default ``model.images.size`` for Qwen2-VL), as many as one of
SmolVLM's 512-pixel pictures."""


def image_settings(family: str, side: int, patch_size: int = 14) -> dict:
    """The family's image-processor settings (SmolVLM's and Qwen2-VL's preprocessor configs, no image splitting):
    Idefics3's pictures ``side`` pixels on their longest edge; Qwen2-VL's at most ``side`` × ``side`` pixels and at
    least 2 × 2 merged patches of ``patch_size`` pixels. Written as JSON rather than by transformers' classes: some
    transformers versions (5.17) build Idefics3's only with torchvision, and polyrl reads the settings itself
    (``polyrl.policy.hf_pictures``)."""
    common = dict(do_convert_rgb=True, do_normalize=True, do_rescale=True, do_resize=True, rescale_factor=1 / 255)
    if family == "idefics3":
        edge = {"longest_edge": side}
        return dict(
            common,
            image_processor_type="Idefics3ImageProcessor",
            do_image_splitting=False,
            do_pad=True,
            image_mean=[0.5] * 3,
            image_std=[0.5] * 3,
            size=edge,
            max_image_size=edge,
            resample=1,
        )
    return dict(
        common,
        image_processor_type="Qwen2VLImageProcessor",
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
        patch_size=patch_size,
        merge_size=2,
        temporal_patch_size=2,
        size={"shortest_edge": (4 * patch_size) ** 2, "longest_edge": side * side},
        resample=3,
    )


def save_vlm(out: Path, config, tokenizer, side: int, patch_size: int = 14, seed: int = 0, device: str = "cpu"):
    """Random weights of ``config``'s vision-language model (torch seed ``seed``, float32, made on ``device``)
    saved at ``out`` with ``tokenizer`` and the processor's files that polyrl reads: the image settings of
    :func:`image_settings` (``side``, ``patch_size``) and, for an Idefics3, the processor's settings as transformers
    5.25 saves them and its chat template (a Qwen2-VL processor also needs a video processor, which needs
    torchvision: a Qwen2-VL's chat template is its tokenizer's). Returns ``out``."""
    import torch
    from transformers import AutoModelForImageTextToText

    family = "idefics3" if config.model_type == "idefics3" else "qwen2_vl"
    with torch.random.fork_rng(devices=[]):  # the host's generator as it was after (a test's seeds stay its own)
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    images = image_settings(family, side, patch_size)
    if family == "idefics3":
        tokens = (side // config.vision_config.patch_size) ** 2 // config.scale_factor**2
        processor = {"image_processor": images, "image_seq_len": tokens, "processor_class": "Idefics3Processor"}
        (Path(out) / "processor_config.json").write_text(json.dumps(processor, indent=2, sort_keys=True) + "\n")
        (Path(out) / "chat_template.jinja").write_text(TEMPLATES[family])
    else:
        (Path(out) / "preprocessor_config.json").write_text(json.dumps(images, indent=2, sort_keys=True) + "\n")
    return out


def _tokenizer(family: str, out: Path):
    """The family's tokenizer with its image tokens and chat template (SmolLM2's is unpacked into ``out`` first)."""
    from transformers import AutoTokenizer

    if family == "idefics3":
        smollm2 = HERE / "smollm2-135m"
        with gzip.open(smollm2 / "tokenizer.json.gz", "rb") as src, open(out / "tokenizer.json", "wb") as dst:
            shutil.copyfileobj(src, dst)
        shutil.copy(smollm2 / "tokenizer_config.json", out / "tokenizer_config.json")
        tokenizer = AutoTokenizer.from_pretrained(out)
        special = IDEFICS3_TOKENS
    else:
        from polyrl.policy.tiny import build_tiny_tokenizer

        tokenizer = build_tiny_tokenizer()
        special = QWEN2_VL_TOKENS
    tokenizer.add_special_tokens({"additional_special_tokens": special}, replace_extra_special_tokens=False)
    tokenizer.eos_token = special[-1]
    tokenizer.chat_template = TEMPLATES[family]
    return tokenizer


def _config(shape: str, family: str, tokenizer, layers, vision_layers, small: bool) -> dict:
    config = json.loads((HERE / shape / "config.json").read_text())
    text, vision = config["text_config"], config["vision_config"]
    if small:
        text.update(SMALL[family][0])
        vision.update(SMALL[family][1])
    if layers is not None:
        text["num_hidden_layers"] = layers
    if vision_layers is not None:
        vision["depth" if family == "qwen2_vl" else "num_hidden_layers"] = vision_layers
    ids = tokenizer.convert_tokens_to_ids
    if family == "idefics3":
        assert ids("<image>") == config["image_token_id"], "SmolLM2's tokenizer and SmolVLM's image id disagree"
        text["eos_token_id"] = ids("<end_of_utterance>")
    else:  # the tiny tokenizer's ids, not Qwen's
        config.update(
            image_token_id=ids("<|image_pad|>"),
            video_token_id=ids("<|video_pad|>"),
            vision_start_token_id=ids("<|vision_start|>"),
            vision_end_token_id=ids("<|vision_end|>"),
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=ids("<|im_end|>"),
        )
        text.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=ids("<|im_end|>"))
        text["pad_token_id"] = tokenizer.pad_token_id
    return config


def make(
    shape: str,
    out: Path,
    device: str = "cpu",
    layers: int | None = None,
    vision_layers: int | None = None,
    small: bool = False,
    seed: int = 0,
) -> Path:
    """Write the model directory of ``shape`` (random weights made on ``device``) to ``out``; returns ``out``."""
    from transformers import AutoConfig

    if not (HERE / shape / "config.json").is_file() or shape not in ("smolvlm-256m", "qwen2-vl-2b"):
        raise SystemExit(f"make_vlm: unknown shape {shape!r}; choose smolvlm-256m or qwen2-vl-2b")
    family = json.loads((HERE / shape / "config.json").read_text())["model_type"]
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tokenizer = _tokenizer(family, out)
    (out / "config.json").write_text(json.dumps(_config(shape, family, tokenizer, layers, vision_layers, small)))
    config = AutoConfig.from_pretrained(out)
    side = config.vision_config.image_size if family == "idefics3" else PICTURE_SIDE[family][small]
    return save_vlm(out, config, tokenizer, side, seed=seed, device=device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape")
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cpu", help="Where the random weights are made (cpu, cuda, cuda:N).")
    parser.add_argument("--layers", type=int, help="Decoder layers to keep.")
    parser.add_argument("--vision-layers", type=int, help="Vision blocks to keep.")
    parser.add_argument("--small", action="store_true", help="The shape at a CPU test's width (SMALL).")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(make(args.shape, args.out, args.device, args.layers, args.vision_layers, args.small, args.seed))


if __name__ == "__main__":
    main()
