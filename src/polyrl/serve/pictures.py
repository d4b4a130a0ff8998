"""Pictures in chat-completions requests: OpenAI's ``image_url`` content parts, rendered as training renders them.

A picture comes inline only, as a ``data:image/...;base64,`` URI: the server never fetches a URL (an ``http(s)``
one is a 400 that says so). Each is decoded by polyrl's own image reading (:mod:`polyrl.tasks.images`: the formats,
the pixel limit and the modes of a task's pictures), and a message's pictures open its text, as an episode's
messages show them (:class:`~polyrl.rollout.chat.ChatCodec`), so the served prompt's ids are the ids training
builds for the same messages and pictures.
"""

from __future__ import annotations

from typing import Any

import torch

from polyrl.errors import UserError
from polyrl.serve.api_errors import ServeError
from polyrl.serve.schema import ChatMessage

TEXT_ONLY = "this model takes text only: send the messages without image_url parts"


def picture_count(messages: list[ChatMessage]) -> int:
    return sum(len(m.image_urls()) for m in messages)


def check_pictures(messages: list[ChatMessage], image_input, limit: int | None) -> None:
    """Refuse, before decoding anything, pictures sent to a text-only model, more than ``limit`` pictures, a URL
    that is not a data URI, and a picture in a message that is not the user's."""
    count = picture_count(messages)
    if count == 0:
        return
    if image_input is None:
        raise ServeError(400, TEXT_ONLY, param="messages")
    if limit is not None and count > limit:
        raise ServeError(400, f"{count} pictures; at most {limit} fit in one prompt of this model", param="messages")
    for i, message in enumerate(messages):
        for k, url in enumerate(message.image_urls()):
            where = f"messages.{i}.content"
            if message.role != "user":
                raise ServeError(400, f"{where}: only user messages may show pictures", param=where)
            if not url.startswith("data:"):
                scheme = url.split(":", 1)[0][:20] if ":" in url else "relative"
                raise ServeError(
                    400,
                    f"{where} image {k}: a {scheme}: URL; polyrl serve does not fetch URLs: send the picture "
                    "inline as a data URI (data:image/png;base64,...)",
                    param=where,
                )


def decoded_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as the chat codec takes them: text content, and ``images`` (RGB PIL images, decoded with
    polyrl's image limits) where a message shows pictures. A picture that does not decode, is too large or has an
    odd mode is a 400 naming it."""
    from polyrl.tasks.images import image_from_record

    decoded = []
    for i, message in enumerate(messages):
        shown: dict[str, Any] = {"role": message.role, "content": message.text()}
        urls = message.image_urls()
        if urls:
            where = f"messages.{i}.content"
            try:
                shown["images"] = [image_from_record(url, f"{where} image {k}") for k, url in enumerate(urls)]
            except UserError as exc:
                raise ServeError(400, str(exc), param=where) from None
        decoded.append(shown)
    return decoded


def picture_limit(image_input, max_prompt: int | None) -> int | None:
    """The most pictures one prompt may show: a Hugging Face VLM's ``model.images.max_per_prompt``; for the tiny
    VLM, as many as its prompt length holds (each picture is ``tokens`` placeholders)."""
    if image_input is None:
        return None
    limit = getattr(image_input, "max_images", None)
    if limit is None and max_prompt is not None:
        limit = max_prompt // image_input.tokens
    return limit


def codec_of(tokenizer, image_input):
    """The chat codec that renders a vision-language policy's episode messages, as training builds it."""
    from polyrl.policy.prompts import PromptBuilder
    from polyrl.rollout.chat import ChatCodec

    return ChatCodec(PromptBuilder(tokenizer, images=image_input))


def vlm_prompt_ids(codec, messages: list[dict[str, Any]]) -> list[int]:
    """The prompt's ids (an :class:`~polyrl.forward.batch.ImageIds` when it shows pictures) through the codec; a
    template or message the policy's rendering refuses is a 400."""
    from jinja2 import TemplateError

    try:
        return codec.start(messages, tools=[])
    except TemplateError as exc:
        raise ServeError(400, f"the model's chat template refused the messages: {exc}", param="messages") from None
    except UserError as exc:
        raise ServeError(400, str(exc), param="messages") from None


def logits_with_pictures(model, ids: torch.Tensor, pixels: torch.Tensor | None) -> torch.Tensor:
    """``[1, L, V]`` logits of ``ids [1, L]`` with the prompt's ``pixels`` (None: text only): the tiny VLM's own
    forward embeds them, a Hugging Face VLM takes them through its picture inputs (:mod:`polyrl.forward.pictures`)."""
    if pixels is None:
        return model(ids).logits
    from polyrl.forward.pictures import PictureForward

    pictures = PictureForward.of(model)
    if pictures is None:  # the tiny VLM
        return model(ids, images=pixels.to(ids.device)).logits
    attention = torch.ones_like(ids)
    inputs = pictures.inputs(model, ids, attention, [pixels])
    return model(input_ids=ids, attention_mask=attention, use_cache=False, **inputs).logits
