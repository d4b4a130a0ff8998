"""Small random checkpoints of any transformers architecture over polyrl's tiny character tokenizer, saved offline
with that tokenizer (importable as ``small_checkpoints``: ``tests/`` is on the path): what the tests of loading
another family's files (Qwen2's biases, a BERT head) point ``model.path`` at."""

from pathlib import Path

import torch

from polyrl.policy.tiny import build_tiny_tokenizer


def save_small_checkpoint(path: Path, config_class, model_class, **shape) -> Path:
    """A ``model_class`` of ``config_class(**shape)`` over the tiny tokenizer's vocabulary, its weights drawn from
    torch seed 0, saved at ``path`` with the tokenizer; returns ``path``."""
    tokenizer = build_tiny_tokenizer()
    config = config_class(vocab_size=len(tokenizer), **shape)
    torch.manual_seed(0)
    model_class(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
