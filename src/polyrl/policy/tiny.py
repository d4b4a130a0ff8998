"""The embedded default policy: a ~1 M-parameter Llama built from a config, with a character tokenizer.

It needs no download and no GPU, saves with ``save_pretrained`` and loads in plain transformers::

    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(path); tok = AutoTokenizer.from_pretrained(path)

The tokenizer has one token per printable ASCII character plus a few whole-word tokens for the chat
markers and answer tags, so a tagged answer costs two tokens instead of seventeen.
"""

from __future__ import annotations

import string

from pydantic import BaseModel, ConfigDict, Field, model_validator
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

TINY = "tiny"
"""The model name of the embedded default (``model.path: tiny``)."""

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
CHAT_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|tool|>")
WORD_TOKENS = ("<answer>", "</answer>", "<tool_call>", "</tool_call>", "<think>", "</think>")

# Minimal chat template: role marker, content; assistant turns end with EOS.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}</s>"
    "{% else %}<|{{ m['role'] }}|>{{ m['content'] }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class TinyVisionConfig(BaseModel):
    """The patch encoder that makes the embedded default a vision-language model (``policy/tiny_vision.py``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="Put a patch encoder in front of the tiny model: it then takes images.")
    image_size: int = Field(32, ge=4, description="Side every picture is resized to, in pixels.")
    patch_size: int = Field(
        8, ge=1, description="Side of the squares a picture is cut into; each is one placeholder token of the prompt."
    )
    layers: int = Field(1, ge=0, description="Transformer blocks of the encoder over a picture's squares.")
    heads: int = Field(4, ge=1, description="Attention heads of those blocks (they must split hidden_size evenly).")

    @model_validator(mode="after")
    def _squares(self):
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} is not a whole number of patch_size {self.patch_size}")
        return self


class TinyModelConfig(BaseModel):
    """Shape of the embedded default model (a LlamaForCausalLM)."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = Field(128, ge=8, description="Width of the residual stream.")
    intermediate_size: int = Field(384, ge=8, description="Width of the MLP.")
    num_layers: int = Field(4, ge=1, description="Transformer blocks.")
    num_heads: int = Field(
        4, ge=1, description="Attention heads: hidden_size / num_heads (the head width) must be a whole, even number."
    )
    max_positions: int = Field(512, ge=16, description="Longest prompt + response in tokens.")
    vision: TinyVisionConfig = Field(
        default_factory=TinyVisionConfig, description="A patch encoder for images (off: the model takes text only)."
    )

    @model_validator(mode="after")
    def _head_width(self):
        """transformers builds the model only when the heads split the width evenly (else a 70-line traceback),
        and rotary embeddings turn pairs of a head's dimensions, so an odd head width fails in the first forward."""
        width, rest = divmod(self.hidden_size, self.num_heads)
        if rest or width % 2:
            raise ValueError(
                f"hidden_size {self.hidden_size} / num_heads {self.num_heads} is not a whole, even head width "
                "(rotary embeddings turn pairs of a head's dimensions)"
            )
        if self.vision.enabled and self.hidden_size % self.vision.heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a whole number of vision.heads {self.vision.heads}"
            )
        return self


def build_tiny_tokenizer():
    """A character-level PreTrainedTokenizerFast with a chat template."""
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    vocab_list = [PAD, BOS, EOS, UNK, *CHAT_TOKENS, *WORD_TOKENS, *chars]
    vocab = {tok: i for i, tok in enumerate(vocab_list)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        pad_token=PAD,
        additional_special_tokens=list(CHAT_TOKENS),
        padding_side="left",
    )
    fast.add_tokens(list(WORD_TOKENS))
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_policy(config: TinyModelConfig | None = None, seed: int = 0):
    """A freshly initialised (model, tokenizer) pair. Weights depend only on ``seed``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = config or TinyModelConfig()
    tokenizer = build_tiny_tokenizer()
    hf_config = LlamaConfig(**tiny_llama_config(config, tokenizer))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(hf_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def tiny_llama_config(config: TinyModelConfig, tokenizer) -> dict:
    """The ``LlamaConfig`` arguments of the tiny model's shape over ``tokenizer``'s vocabulary."""
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
