"""From generations to OpenAI's response objects: ``stop`` sequences, ``logprobs``/``top_logprobs``, and the
``chat.completion`` object or its stream of ``chat.completion.chunk`` server-sent events.

* **stop** — the completion is generated to EOS or ``max_tokens``, then cut before the first occurrence of any
  stop sequence (which is not returned, as with OpenAI); ``finish_reason`` is then ``stop`` and the usage counts
  the tokens up to the one that completed the stop sequence.
* **logprobs** — each returned token's log-probability under the model (a forward pass over prompt and
  completion, before temperature and top-p: the distribution the policy defines), with the ``top_logprobs``
  most likely tokens at that position.
* **stream** — the same completion as server-sent events: a first chunk with the role, one chunk per token
  (its text, and its logprobs when asked), a last chunk with ``finish_reason``, a usage chunk when
  ``stream_options.include_usage``, then ``data: [DONE]``. The chunks are sent once the completion is
  generated (the model generates a whole batch at once), so a stream is a format, not a latency, gain.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Choice:
    """One completion as returned: its token ids (cut at a stop sequence), the text of each, why it ended."""

    ids: list[int]
    pieces: list[str]
    """Text of each token in ``ids``: ``"".join(pieces)`` is the returned content."""
    finish_reason: str
    logprobs: list[dict[str, Any]] | None = None


def token_pieces(tokenizer, ids: list[int]) -> list[str]:
    """The text each token adds to the decoded completion (prefix differences, so multi-byte characters split
    over tokens come out whole, on the token that completes them)."""
    pieces, before = [], ""
    for k in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:k], skip_special_tokens=True)
        pieces.append(text[len(before) :] if text.startswith(before) else text)
        before = text
    return pieces


def make_choice(tokenizer, generation, stops: list[str]) -> Choice:
    """The completion cut before its first stop sequence (if any occurs)."""
    ids = list(generation.completion_ids)
    pieces = token_pieces(tokenizer, ids)
    if generation.finished and pieces:
        pieces.pop()  # the EOS token: counted in the usage, not returned (as with OpenAI)
    reason = "stop" if generation.finished else "length"
    if stops:
        text = "".join(pieces)
        found = [(text.find(s), s) for s in stops if s in text]
        if found:
            at, stop = min(found)
            ends, total = [], 0
            for piece in pieces:
                total += len(piece)
                ends.append(total)
            completed = next(k for k, end in enumerate(ends) if end >= at + len(stop))  # where generation stops
            kept = [k for k, end in enumerate(ends) if end <= at]
            cut = text[:at]
            pieces = [pieces[k] for k in kept]
            if "".join(pieces) != cut:  # the token in which the stop sequence begins also holds text before it
                pieces.append(cut[len("".join(pieces)) :])
            return Choice(ids[: completed + 1], pieces, "stop")
    return Choice(ids, pieces, reason)


def _entry(tokenizer, token_id: int, logprob: float) -> dict[str, Any]:
    token = tokenizer.decode([token_id])
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


@torch.no_grad()
def add_logprobs(model, device, tokenizer, prompt_ids: list[int], choices: list[Choice], top: int) -> None:
    """Fill each choice's ``logprobs`` (one entry per returned piece) from one forward pass per choice of ``model``
    (its weights on ``device``), with the prompt's pictures where it shows any."""
    from polyrl.forward.batch import prompt_images
    from polyrl.serve.pictures import logits_with_pictures

    shown = prompt_images(prompt_ids)
    pixels = shown[0] if shown is not None else None
    for choice in choices:
        count = len(choice.pieces)
        if count == 0:
            choice.logprobs = []
            continue
        ids = list(prompt_ids) + choice.ids[:count]
        logits = logits_with_pictures(model, torch.tensor([ids], device=device), pixels)
        logits = logits[0, len(prompt_ids) - 1 : len(ids) - 1]
        logps = torch.log_softmax(logits.float(), dim=-1)
        entries = []
        for k, token_id in enumerate(choice.ids[:count]):
            entry = _entry(tokenizer, token_id, float(logps[k, token_id]))
            entry["token"] = choice.pieces[k] if k < len(choice.pieces) else entry["token"]
            values, indices = logps[k].topk(top) if top else (torch.empty(0), torch.empty(0, dtype=torch.long))
            entry["top_logprobs"] = [_entry(tokenizer, int(i), float(v)) for v, i in zip(values, indices)]
            entries.append(entry)
        choice.logprobs = entries


def usage(prompt_tokens: int, choices: list[Choice]) -> dict[str, int]:
    completion_tokens = sum(len(c.ids) for c in choices)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion_object(model_name: str, prompt_tokens: int, choices: list[Choice]) -> dict[str, Any]:
    """OpenAI's ``chat.completion`` object."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_name,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": "".join(c.pieces)},
                "finish_reason": c.finish_reason,
                "logprobs": {"content": c.logprobs} if c.logprobs is not None else None,
            }
            for i, c in enumerate(choices)
        ],
        "usage": usage(prompt_tokens, choices),
    }


def completion_events(
    model_name: str, prompt_tokens: int, choices: list[Choice], include_usage: bool
) -> Iterator[str]:
    """The completion as OpenAI's stream: ``data: {chunk}`` events, then ``data: [DONE]``."""
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time())}
    head["model"] = model_name

    def event(choices_part: list[dict], **extra) -> str:
        return f"data: {json.dumps({**head, 'choices': choices_part, **extra})}\n\n"

    for i, choice in enumerate(choices):
        yield event(
            [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]
        )
        for k, piece in enumerate(choice.pieces):
            logprobs = {"content": [choice.logprobs[k]]} if choice.logprobs is not None else None
            yield event([{"index": i, "delta": {"content": piece}, "logprobs": logprobs, "finish_reason": None}])
        yield event([{"index": i, "delta": {}, "logprobs": None, "finish_reason": choice.finish_reason}])
    if include_usage:
        yield event([], usage=usage(prompt_tokens, choices))
    yield "data: [DONE]\n\n"
