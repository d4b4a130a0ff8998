"""The chat-completions request the server honours, and how its sampling fields map onto the generator."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def check_no_lone_surrogate(text: str) -> None:
    """ValueError where ``text`` holds a lone UTF-16 surrogate: JSON "\\ud800" decodes to a str that no tokenizer
    (or UTF-8 encoder) accepts; a valid pair is one character. What ``polyrl serve`` and the harness endpoint
    check of every message's text."""
    bad = LONE_SURROGATE.search(text)
    if bad is not None:
        raise ValueError(f"contains a lone UTF-16 surrogate (U+{ord(bad.group()):04X}) at character {bad.start()}")


# Below these, sampling is greedy. vLLM uses the same 1e-5 (``_SAMPLING_EPS``): logits / 1e-300 overflow to inf
# and softmax turns inf into NaN, and a nucleus below the top token's probability keeps only that token anyway.
MIN_TEMPERATURE = 1e-5
MIN_TOP_P = 1e-5


class TextPart(BaseModel):
    """A ``{"type": "text", "text": ...}`` content part."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["text"]
    text: str

    @field_validator("text")
    @classmethod
    def _no_lone_surrogate(cls, text: str) -> str:
        check_no_lone_surrogate(text)
        return text


class ImageURL(BaseModel):
    model_config = ConfigDict(extra="ignore")

    url: str
    detail: str | None = None
    """Accepted and ignored: every picture is resized to the policy's one input size, as in training."""


class ImagePart(BaseModel):
    """A ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`` content part."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class ChatMessage(BaseModel):
    """One message: its content a string, or OpenAI's content parts (text, and pictures as data URIs)."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: str | list[ContentPart]

    @field_validator("content")
    @classmethod
    def _no_lone_surrogate(cls, content):
        if isinstance(content, str):
            check_no_lone_surrogate(content)
        return content

    def text(self) -> str:
        """The message's text: its string content, or its text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content if isinstance(part, TextPart))

    def image_urls(self) -> list[str]:
        """The URLs of the message's image parts, in order."""
        if isinstance(self.content, str):
            return []
        return [part.image_url.url for part in self.content if isinstance(part, ImagePart)]


REFUSED = ("tools", "tool_choice", "functions", "function_call", "response_format", "logit_bias", "audio")
"""Request fields that change what a completion is and that the server does not implement: a 400, never ignored."""
PENALTIES = ("presence_penalty", "frequency_penalty")
"""Accepted at 0 (their default), refused otherwise."""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ChatRequest(BaseModel):
    """The subset of OpenAI's chat-completions request the server honours. A field that would change the
    completion and is not implemented (``REFUSED``, non-zero penalties) is a 400; the rest (``user``,
    ``metadata``, …) does not change what is generated and is ignored."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=64)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    seed: int | None = None

    @field_validator("stop")
    @classmethod
    def _stop_sequences(cls, stop):
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("give at most 4 non-empty stop sequences")
        return stops

    def unsupported(self) -> tuple[str, str] | None:
        """``(field, why)`` for the first field asked for that the server does not implement, else None."""
        extra = self.model_extra or {}
        for name in REFUSED:
            if extra.get(name) not in (None, [], {}):
                return name, f"{name} is not supported by polyrl serve"
        for name in PENALTIES:
            if extra.get(name) not in (None, 0, 0.0):
                return name, f"{name} is not supported by polyrl serve (only 0)"
        if self.top_logprobs is not None and not self.logprobs:
            return "top_logprobs", "top_logprobs needs logprobs: true"
        if self.stream_options is not None and not self.stream:
            return "stream_options", "stream_options needs stream: true"
        return None


@dataclass(frozen=True)
class Sampling:
    """Arguments for ``GenerationBackend.generate``: finite temperature and top-p, or greedy."""

    temperature: float
    top_p: float
    greedy: bool


def sampling(temperature: float, top_p: float) -> Sampling:
    """Greedy when ``temperature`` or ``top_p`` is below its floor (the limit of sampling as either goes to 0)."""
    if temperature < MIN_TEMPERATURE or top_p < MIN_TOP_P:
        return Sampling(temperature=1.0, top_p=1.0, greedy=True)
    return Sampling(temperature=temperature, top_p=top_p, greedy=False)
