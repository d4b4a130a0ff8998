"""Turn a Problem into the token ids the policy sees."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from polyrl.errors import UserError
from polyrl.policy.loading import TINY
from polyrl.policy.presets import PRESETS, is_gguf_path
from polyrl.tasks import Problem
from polyrl.yaml_files import DuplicateKeyError, safe_load

PromptStyle = Literal["natural", "terse"]


def default_style(model_path: str) -> PromptStyle:
    """``terse`` for the embedded tiny model (a character vocabulary trained on the shorthand); for a model saved
    inside a polyrl run (``runs/x/sft_model``), the style that run trained with; ``natural`` for any other
    Hugging Face model (an instruction-tuned LLM reads a statement of the rules and the answer shape)."""
    if model_path == TINY:
        return "terse"
    if model_path in PRESETS or is_gguf_path(model_path):  # a real LM, never a polyrl run's saved model
        return "natural"
    return run_prompt_style(model_path) or "natural"


def _run_prompt(model_path: str | Path) -> dict:
    """The ``prompt`` section of the run a model was trained in, when ``model_path`` is inside a run directory."""
    config = Path(model_path).resolve().parent / "config.yaml"
    if not config.is_file():
        return {}
    try:
        data = safe_load(config.read_text())
    except DuplicateKeyError as exc:
        raise UserError(f"{config} (the config of the run {model_path} is in): {exc}") from None
    except (OSError, yaml.YAMLError):
        return {}  # not polyrl's config after all: the model's defaults apply
    prompt = data.get("prompt") if isinstance(data, dict) else None
    return prompt if isinstance(prompt, dict) else {}


def run_prompt_field(model_path: str | Path) -> str | None:
    """The prompt field a polyrl run trained with, when ``model_path`` is a model inside a run directory."""
    field = _run_prompt(model_path).get("field")
    return field if field in ("prompt", "question") else None


def run_prompt_style(model_path: str | Path) -> PromptStyle | None:
    """The prompt style a polyrl run trained with (natural or terse), when ``model_path`` is inside a run."""
    style = _run_prompt(model_path).get("style")
    return style if style in ("natural", "terse") else None


class PromptConfig(BaseModel):
    """How problems are shown to the policy."""

    model_config = ConfigDict(extra="forbid")

    field: Literal["prompt", "question"] = Field(
        "prompt", description="'prompt' adds the answer-format instruction; 'question' shows the bare statement."
    )
    style: PromptStyle | None = Field(
        None,
        description="'natural': a full statement of the rules and the answer shape (for LLMs); 'terse': the "
        "shorthand the tiny model learns. Default: terse for model.path tiny, the run's own style for a model saved in a "
        "polyrl run directory, natural otherwise.",
    )
    system: str | None = Field(None, description="Optional system message.")
    chat_template: bool = Field(True, description="Apply the tokenizer's chat template when it has one.")
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra arguments of the chat template, e.g. {enable_thinking: false} for Qwen3.",
    )
    think_tags: tuple[str, str] | None = Field(
        None,
        description="Reasoning models: the tags around the thinking block, e.g. ['<think>', '</think>']; "
        "the block is cut off before the answer is extracted.",
    )

    @field_validator("think_tags")
    @classmethod
    def _distinct_tags(cls, tags):
        if tags is not None and (not tags[0].strip() or not tags[1].strip() or tags[0] == tags[1]):
            raise ValueError("think_tags must be two different non-empty tags, e.g. ['<think>', '</think>']")
        return tags

    def resolved(self, model_path: str) -> PromptConfig:
        """This config with ``style`` filled in for ``model_path`` when it was left unset."""
        if self.style is not None:
            return self
        return self.model_copy(update={"style": default_style(model_path)})


def problem_text(problem: Problem, field: str, style: PromptStyle | None = "terse") -> str:
    """The text shown for ``problem``: its natural statement when asked for and the task has one, else the terse
    one (``style`` None, an unresolved config, means terse)."""
    if style == "natural":
        natural = getattr(problem, f"natural_{field}", None)
        if natural is not None:
            return natural
    return getattr(problem, field)


class PromptBuilder:
    """Builds prompt token ids for problems (chat template when the tokenizer has one). With ``images`` (a
    vision-language policy's ``Policy.image_input``), a problem's pictures open its user message as placeholder
    tokens and its ids are an :class:`~polyrl.forward.batch.ImageIds` that carries their pixels."""

    def __init__(self, tokenizer, config: PromptConfig | None = None, images=None):
        self.tokenizer = tokenizer
        self.config = config or PromptConfig()
        self.images = images
        template = getattr(tokenizer, "chat_template", None)
        if template is None:  # a Hugging Face VLM whose template is its processor's alone
            template = getattr(images, "template", None)
        self.use_chat = self.config.chat_template and template is not None
        self.max_tokens: int | None = None
        """The longest prompt :meth:`ids` builds (None: no limit); see :meth:`limit`."""
        self._room = ""

    def limit(self, max_tokens: int, room: str) -> None:
        """Refuse, in one line, a prompt longer than ``max_tokens``: ``room`` says where the limit comes from (the
        model's positions less the longest response of the run)."""
        self.max_tokens, self._room = max_tokens, room

    def content(self, problem: Problem) -> str:
        """The user message for ``problem`` in the configured field and style."""
        return problem_text(problem, self.config.field, self.config.style)

    def text(self, problem: Problem) -> str:
        if problem.images and self.images is None:  # check_modalities refuses the task before any prompt is built
            raise UserError(f"task {problem.task} has images; the policy takes text only")
        if hasattr(self.images, "check_count"):  # a Hugging Face VLM
            self.images.check_count(problem)
        return self.render(self.content(problem), len(problem.images))

    def render(self, content: str, pictures: int = 0) -> str:
        """One user message ``content`` (after the configured system prompt) as the policy reads it: its chat
        template, or a Hugging Face VLM processor's (text as a text part, ``pictures`` image parts before it, each
        expanded to the model's image tokens), or plain text; other image inputs put ``pictures`` placeholders
        before the text."""
        processor = self.use_chat and hasattr(self.images, "chat_text")
        if pictures and not processor:
            content = self.images.placeholders(pictures) + content
        if not self.use_chat:
            system = f"{self.config.system}\n" if self.config.system else ""
            return f"{system}{content}\n"
        messages = [{"role": "user", "content": content}]
        if self.config.system:
            messages.insert(0, {"role": "system", "content": self.config.system})
        kwargs = self.config.chat_template_kwargs
        if processor:
            return self.images.chat_text(self.tokenizer, messages, pictures, **kwargs)
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)

    def text_ids(self, content: str) -> list[int]:
        """Token ids of one text-only user message ``content`` as :meth:`render` shows it (no length limit)."""
        return self._tokens(self.render(content))

    def _tokens(self, text: str) -> list[int]:
        """``text`` tokenized; the tokenizer's special tokens only for plain text (a chat template writes its own)."""
        return self.tokenizer(text, add_special_tokens=not self.use_chat).input_ids

    def ids(self, problem: Problem) -> list[int]:
        ids = self._tokens(self.text(problem))
        if self.max_tokens is not None and len(ids) > self.max_tokens:
            raise UserError(
                f"the prompt of {problem.task} problem {problem.split}/{problem.seed} is {len(ids)} tokens, more than "
                f"the {self.max_tokens} left by {self._room}"
            )
        return self.images.prompt(ids, problem.images) if problem.images else ids

    def response_ids(self, response: str) -> list[int]:
        """Token ids of a response followed by EOS (what SFT trains on)."""
        ids = self.tokenizer(response, add_special_tokens=False).input_ids
        return ids + [self.tokenizer.eos_token_id]
