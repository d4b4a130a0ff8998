"""Character-level tokenizers carrying the real chat templates of four model families (fixtures)."""

from __future__ import annotations

import string
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "chat_templates"

# family: (template file, bos, eos, special tokens, plain added tokens) as in the models' tokenizer configs
FAMILIES = {
    "qwen2_5": (
        "qwen2_5_instruct.jinja",
        None,
        "<|im_end|>",
        ["<|im_start|>", "<|endoftext|>"],
        ["<tool_call>", "</tool_call>"],
    ),
    "qwen3": (
        "qwen3.jinja",
        None,
        "<|im_end|>",
        ["<|im_start|>", "<|endoftext|>"],
        ["<tool_call>", "</tool_call>", "<think>", "</think>"],
    ),
    "llama3_1": (
        "llama3_1_instruct.jinja",
        "<|begin_of_text|>",
        "<|eot_id|>",
        ["<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>"],
        [],
    ),
    "llama3_2": (
        "llama3_2_instruct.jinja",
        "<|begin_of_text|>",
        "<|eot_id|>",
        ["<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>"],
        [],
    ),
    "mistral": (
        "mistral_7b_instruct_v0_3.jinja",
        "<s>",
        "</s>",
        [
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ],
        [],
    ),
}


def family_tokenizer(family: str):
    """A PreTrainedTokenizerFast: one token per printable character, the family's control tokens, its template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    template, bos, eos, specials, plain = FAMILIES[family]
    unk, pad = "<unk>", "<pad>"
    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    vocab_list = [unk, pad, eos, *([bos] if bos else []), *specials, *plain, *chars]
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(vocab_list)}, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        unk_token=unk,
        pad_token=pad,
        additional_special_tokens=specials,
        padding_side="left",
    )
    fast.add_tokens(plain)
    fast.chat_template = (FIXTURES / template).read_text()
    return fast
