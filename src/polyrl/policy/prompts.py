"""Turn a Problem into the token ids the policy sees."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from polyrl.tasks import Problem


class PromptConfig(BaseModel):
    """How problems are shown to the policy."""

    model_config = ConfigDict(extra="forbid")

    field: Literal["prompt", "question"] = Field(
        "prompt", description="'prompt' adds the answer-format instruction; 'question' shows the bare statement."
    )
    system: str | None = Field(None, description="Optional system message.")
    chat_template: bool = Field(True, description="Apply the tokenizer's chat template when it has one.")


class PromptBuilder:
    """Builds prompt token ids for problems (chat template when the tokenizer has one)."""

    def __init__(self, tokenizer, config: PromptConfig | None = None):
        self.tokenizer = tokenizer
        self.config = config or PromptConfig()
        self.use_chat = self.config.chat_template and getattr(tokenizer, "chat_template", None) is not None

    def text(self, problem: Problem) -> str:
        content = getattr(problem, self.config.field)
        if not self.use_chat:
            system = f"{self.config.system}\n" if self.config.system else ""
            return f"{system}{content}\n"
        messages = [{"role": "user", "content": content}]
        if self.config.system:
            messages.insert(0, {"role": "system", "content": self.config.system})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def ids(self, problem: Problem) -> list[int]:
        return self.tokenizer(self.text(problem), add_special_tokens=not self.use_chat).input_ids

    def response_ids(self, response: str) -> list[int]:
        """Token ids of a response followed by EOS (what SFT trains on)."""
        ids = self.tokenizer(response, add_special_tokens=False).input_ids
        return ids + [self.tokenizer.eos_token_id]
