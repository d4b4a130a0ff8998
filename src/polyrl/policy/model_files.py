"""What polyrl checks when it reads a model from files, so that a damaged or mismatched checkpoint is one line
(exit code 2) before anything trains or serves, never a traceback or random weights.

- every ``*.safetensors`` file opens (:func:`check_weight_files`): a file cut short or overwritten was a
  54-60 line traceback from inside transformers;
- every weight the config asks for is in the files, in the shape it asks for (:func:`check_loading_info`):
  transformers initialises missing weights at random and says so in a warning table, and stops on a shape
  mismatch with a 71-83 line traceback (weights in the files that the config has no place for are a one-line
  warning);
- the model is causal (:func:`check_causal`): ``model_type: bert`` loads as ``BertLMHeadModel``, which
  attends both ways unless its config says ``is_decoder``;
- no weight is NaN or infinite (:func:`first_nonfinite`), also after converting a GGUF file
  (``polyrl.policy.presets``) and before a trained model is saved (``polyrl.train.state``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from polyrl.errors import UserError

__all__ = [
    "check_causal",
    "check_loading_info",
    "check_weight_files",
    "first_nonfinite",
    "one_line",
    "quiet_from_pretrained",
]

SHOWN_KEYS = 3
"""Weight names an error lists before "and N more"."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``exc``'s message on one line (whitespace collapsed, cut at ``limit`` characters), or its type's name."""
    text = " ".join(str(exc).split())
    if not text:
        return type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quiet_from_pretrained(path: str, model_class, **kwargs) -> tuple[Any, Any, dict[str, Any]]:
    """``(model, tokenizer, loading info)`` of the Hugging Face directory ``path``: ``model_class.from_pretrained``
    with ``kwargs`` and the directory's tokenizer, transformers' own logging quiet meanwhile (its load report is a
    table; what matters in it, :func:`check_loading_info` raises in one line). Any error while reading is a
    one-line UserError."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model, info = model_class.from_pretrained(path, output_loading_info=True, **kwargs)
    except Exception as exc:  # damaged files raise many kinds from transformers, tokenizers and torch
        raise UserError(f"cannot load model from {path!r}: {one_line(exc)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    return model, tokenizer, info


def check_weight_files(path: str | Path) -> None:
    """UserError naming the first ``*.safetensors`` file in ``path`` whose header does not read back; the
    header's check covers the size, so a file cut short fails here too."""
    from safetensors import safe_open

    for file in sorted(Path(path).glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as f:
                f.keys()
        except Exception as exc:  # safetensors raises its own error type, and OSError for what it cannot map
            detail = one_line(exc).removeprefix("Error while deserializing header: ")
            raise UserError(
                f"{file} is damaged or not a safetensors file ({detail}): replace it with an intact copy"
            ) from None


def _listed(keys: Iterable[str]) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else ""
    return ", ".join(keys[:SHOWN_KEYS]) + more


def check_loading_info(info: dict[str, Any], path: str | Path) -> None:
    """UserError when ``from_pretrained(..., output_loading_info=True)`` found a weight of the wrong shape or
    none at all for one the config asks for (transformers would have initialised it at random)."""
    mismatched = sorted(info.get("mismatched_keys") or ())
    if mismatched:
        name, found, expected = mismatched[0]
        more = f" (and {len(mismatched) - 1} more)" if len(mismatched) > 1 else ""
        raise UserError(
            f"model at {str(path)!r}: weight {name} is {tuple(found)} in the files but {tuple(expected)} in "
            f"config.json{more}: the config does not describe these weights"
        )
    missing = info.get("missing_keys") or ()
    if missing:
        raise UserError(
            f"model at {str(path)!r}: {len(missing)} weights its config.json asks for are not in the files "
            f"({_listed(missing)}); they would start random: the config does not describe these weights"
        )
    unused = info.get("unexpected_keys") or ()
    if unused:  # a warning: checkpoints carry extra tensors (other heads, training state) more often than mistakes
        warnings.warn(
            f"model at {str(path)!r}: {len(unused)} weights in the files are not part of the model its config.json "
            f"describes ({_listed(unused)}); they are left out",
            stacklevel=2,
        )


def check_causal(model, path: str | Path) -> None:
    """UserError unless ``model`` is causal: its logits at the first position do not change with the second
    token. An encoder loaded as a language model (``model_type: bert`` without ``is_decoder``) sees both ways."""
    import torch

    ids = torch.tensor([[0, 1], [0, 2]])
    try:
        with torch.no_grad():
            first = model(input_ids=ids).logits[:, 0].float()
    except Exception as exc:  # whatever the architecture raises on a plain input_ids call
        raise UserError(f"model at {str(path)!r} does not run as a causal language model: {one_line(exc)}") from None
    scale = float(first.abs().max()) or 1.0
    if float((first[0] - first[1]).abs().max()) > 1e-3 * scale:
        kind = type(model).__name__
        raise UserError(
            f"model at {str(path)!r} ({kind}) is not a causal language model: its first position sees the tokens "
            "after it (an encoder; a decoder's config says is_decoder: true)"
        )


def first_nonfinite(named: Iterable[tuple[str, Any]]) -> tuple[str, int, int] | None:
    """The first floating-point tensor of ``named`` (name, tensor) holding NaN or infinity, as (name, how many
    such values, of how many), or None. A sharded tensor is checked in its local shard."""
    import torch

    with torch.no_grad():
        for name, tensor in named:
            local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
            if not local.is_floating_point() or local.is_meta or local.numel() == 0:
                continue
            if torch.isfinite(local.sum(dtype=torch.float32)):  # one pass, no mask; a NaN or inf makes the sum so
                continue
            bad = int((~torch.isfinite(local)).sum())
            if bad:  # else finite values whose sum overflowed
                return name, bad, local.numel()
    return None


def model_positions(model) -> int | None:
    """The longest sequence ``model`` was built for (``max_position_embeddings``), or None where it has no limit."""
    config = getattr(model, "config", None)
    positions = getattr(config, "max_position_embeddings", None)
    if positions is None and hasattr(config, "get_text_config"):  # a vision-language model: its language model's
        positions = getattr(config.get_text_config(), "max_position_embeddings", None)
    return positions if isinstance(positions, int) and positions > 0 else None
