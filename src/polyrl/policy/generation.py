"""Generation backends behind one interface. The first: batched transformers ``generate``.

A backend turns prompt token ids into completions. The trainer never calls ``model.generate`` itself,
so a different engine (vLLM, a Ray worker pool) can be dropped in by implementing the same protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch


@dataclass
class Generation:
    """One completion of one prompt."""

    prompt_ids: list[int]
    completion_ids: list[int]
    """Generated tokens, including the final EOS when the model stopped by itself."""
    text: str
    """The completion decoded without special tokens."""
    finished: bool
    """True when the model emitted EOS; False when it hit ``max_new_tokens``."""


class GenerationBackend(Protocol):
    def generate(
        self, prompts: Sequence[list[int]], *, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
        greedy: bool = False,
    ) -> list[Generation]: ...

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        """Make the backend generate with ``model``'s current weights (a no-op when it shares them)."""
        ...


def eos_ids(model, tokenizer) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


class TransformersBackend:
    """Batched sampling with ``model.generate`` (KV cache, left padding), in chunks of ``batch_size``."""

    def __init__(self, model, tokenizer, batch_size: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.version = 0
        self._eos = eos_ids(model, tokenizer)

    def sync_weights(self, model, version: int) -> None:
        self.model = model  # same process, same tensors
        self.version = version

    @torch.no_grad()
    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False):
        out: list[Generation] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(prompts), self.batch_size):
                out += self._generate_chunk(prompts[start : start + self.batch_size], max_new_tokens, temperature, top_p, greedy)
        finally:
            self.model.train(was_training)
        return out

    def _generate_chunk(self, prompts, max_new_tokens, temperature, top_p, greedy):
        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        device = next(self.model.parameters()).device
        input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p)
            attention[i, width - len(p) :] = 1
        sampling = {} if greedy else {"temperature": temperature, "top_p": top_p, "top_k": 0}
        seqs = self.model.generate(
            input_ids=input_ids.to(device), attention_mask=attention.to(device), max_new_tokens=max_new_tokens,
            do_sample=not greedy, pad_token_id=pad, eos_token_id=self._eos, **sampling,
        )
        gens = []
        for prompt, row in zip(prompts, seqs[:, width:].tolist()):
            completion, finished = [], False
            for tok in row:
                completion.append(tok)
                if tok in self._eos:
                    finished = True
                    break
            text = self.tokenizer.decode(completion, skip_special_tokens=True)
            gens.append(Generation(list(prompt), completion, text, finished))
        return gens
