"""The chat codec of multi-turn rollouts: episode messages to token ids, token-in, token-out.

The policy's own tokens are kept exactly as sampled (policy_mask 1); everything the environment adds between
turns — the end of the assistant turn when the policy did not close it, the rendered observation messages and
the next generation prompt — is tokenized from the chat template's text and masked out of the loss (policy_mask
0). Observations are rendered as the *difference* between the template applied with and without them, so any
chat template (tiny, Qwen, Llama) works.

Pictures (a vision-language policy): the problem's open the first user message, as in a single-turn prompt, and a
message may carry its own (``"images"``: PIL images or uint8 arrays, e.g. a zoomed crop), shown before its text.
Each is its placeholder tokens in the ids; the ids carry the pixels (:class:`~polyrl.forward.batch.ImageIds`). A
Hugging Face vision-language policy's messages are rendered by its processor's chat template, each picture an image
part before the message's text, and each picture's placeholder expanded to its image tokens
(:class:`~polyrl.policy.hf_vision.HFImageInput`), as its single-turn prompts are.
"""

from __future__ import annotations

from polyrl.envs.environment import Environment, Message
from polyrl.envs.tool_formats import ToolFormat, UsesToolFormat, describe_tools, resolve_tool_format
from polyrl.errors import UserError
from polyrl.forward.batch import ImageIds
from polyrl.policy.prompts import PromptBuilder
from polyrl.tasks import Problem
from polyrl.tasks.images import rgb_image

_PLACEHOLDER = "\x00polyrl\x00"


def user_text(messages: list[Message]) -> str:
    """The text of the user messages among ``messages``: the prompt an episode's policy read, as a TRL-style
    reward function receives it."""
    return "\n".join(m["content"] for m in messages if m.get("role") == "user" and isinstance(m.get("content"), str))


class ChatCodec:
    """Renders episode messages into token ids with the tokenizer's chat template (or plain text), and binds
    tool-using tasks and environments to the tool-call format of that template."""

    def __init__(self, prompts: PromptBuilder):
        self.tok = prompts.tokenizer
        self.system = prompts.config.system
        self.use_chat = prompts.use_chat
        self.content = prompts.content  # the problem in the configured field and style
        self.template_kwargs = prompts.config.chat_template_kwargs
        self.images = prompts.images
        """The policy's image input (None: it takes text only)."""
        self.image_parts = self.use_chat and hasattr(self.images, "chat_text")
        """Messages are rendered by a Hugging Face VLM processor's template: content as parts, pictures as image parts."""
        self.template = self.images.template if self.image_parts else self.tok.chat_template
        self.natural = prompts.config.style == "natural"
        """Tools are described in sentences and environments word their messages for an instruction-tuned LM."""
        self.native_tools = self.use_chat and "tools" in (self.template or "")
        if self.use_chat:
            user = [{"role": "user", "content": "q"}]
            with_turn = self._render(user + [{"role": "assistant", "content": _PLACEHOLDER}])
            self.turn_end = with_turn[with_turn.rindex(_PLACEHOLDER) + len(_PLACEHOLDER) :]
        self.eos_text = self.tok.eos_token or ""
        self._formats: dict[str, tuple[ToolFormat, dict | None]] = {}
        self._kept: dict[str, dict[int, str]] = {}
        self.tool_format = self.resolve("auto")[0]
        """The format tools are described in when the template has no native tool format."""

    def resolve(self, requested: str) -> tuple[ToolFormat, dict | None]:
        if requested not in self._formats:
            self._formats[requested] = resolve_tool_format(requested, self.tok if self.use_chat else None)
        return self._formats[requested]

    def bind(self, target) -> None:
        """Give a tool-using task or environment this tokenizer's tool format (``env.tool_format`` resolved), and an
        environment the prompt style its messages are worded in."""
        if isinstance(target, Environment):
            target.natural = self.natural
        if isinstance(target, UsesToolFormat):
            fmt, response_template = self.resolve(target.requested_tool_format)
            target.bind_tool_format(fmt, response_template)
            self.tool_format = fmt

    def action_text(self, completion_ids: list[int], text: str) -> str:
        """The policy's turn as the environment reads it: ``text`` (decoded without special tokens) with the
        tool format's marker tokens put back where the vocabulary makes them special (``[TOOL_CALLS]``)."""
        keep = self._kept_ids(self.tool_format)
        if not keep.keys() & set(completion_ids):
            return text
        pieces, start = [], 0
        for i, t in enumerate(completion_ids):
            if t in keep:
                pieces += [self.tok.decode(completion_ids[start:i], skip_special_tokens=True), keep[t]]
                start = i + 1
        return "".join(pieces) + self.tok.decode(completion_ids[start:], skip_special_tokens=True)

    def _kept_ids(self, fmt: ToolFormat) -> dict[int, str]:
        if fmt.name not in self._kept:
            ids = {self.tok.convert_tokens_to_ids(marker): marker for marker in fmt.keep_tokens}
            self._kept[fmt.name] = {
                i: marker
                for i, marker in ids.items()
                if i is not None and i != self.tok.unk_token_id and not self.tok.decode([i], skip_special_tokens=True)
            }
        return self._kept[fmt.name]

    def _render(self, messages: list[Message], tools=None, generation_prompt: bool = False) -> str:
        kwargs = {**self.template_kwargs, **({"tools": tools} if tools else {})}
        if self.image_parts:
            return self._render_parts(messages, generation_prompt, kwargs)
        return self.tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **kwargs
        )

    def _render_parts(self, messages: list[Message], generation_prompt: bool, kwargs: dict) -> str:
        """``messages`` through a Hugging Face VLM processor's template (text content as a text part, as its
        templates take it), each picture's placeholder expanded to its image tokens."""
        shown = [
            {**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m["content"], str) else m
            for m in messages
        ]
        pictures = sum(1 for m in shown for part in m["content"] if part.get("type") == "image")
        text = self.tok.apply_chat_template(
            shown, chat_template=self.template, tokenize=False, add_generation_prompt=generation_prompt, **kwargs
        )
        return self.images.expand(text, pictures)

    def _ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False).input_ids

    def shown(self, messages: list[Message], problem: Problem | None = None) -> list[Message]:
        """An episode's first messages as the policy reads them: a first message that is the problem's prompt
        shows the configured field and style instead."""
        if problem is not None and messages and messages[0]["content"] == problem.prompt:
            return [{**messages[0], "content": self.content(problem)}, *messages[1:]]
        return messages

    def start(self, messages: list[Message], tools: list[dict], problem: Problem | None = None) -> list[int]:
        """Prompt ids of the first turn (:meth:`shown`); tools go through the template when it has a native format."""
        messages = self.shown(messages, problem)
        pictures = list(problem.images) if problem is not None else []
        messages, pictures = self._placeholders(messages, pictures)
        ids = self._with_pictures(self._start_ids(messages, tools), pictures)
        if problem is not None:
            self.check_pictures(problem, ids, [])
        return ids

    def _start_ids(self, messages: list[Message], tools: list[dict]) -> list[int]:
        system = [self.system] if self.system else []
        if tools and not self.native_tools:
            system.append(describe_tools(tools, self.tool_format, self.natural))
        if not self.use_chat:
            text = "\n".join(system + [m["content"] for m in messages]) + "\n"
            return self.tok(text).input_ids
        head = [{"role": "system", "content": "\n".join(system)}] if system else []
        return self._ids(self._render(head + messages, tools if self.native_tools else None, generation_prompt=True))

    def between_turns(self, observation: list[Message], finished: bool) -> list[int]:
        """Environment ids after a policy turn: close the turn, the observation, the next generation prompt.
        The observation is what the template renders after the (placeholder) assistant turn, so templates that
        render an earlier turn differently once it is no longer the last (Qwen3's think block) still work."""
        observation, pictures = self._placeholders(observation, [])
        return self._with_pictures(self._between_ids(observation, finished), pictures)

    def _between_ids(self, observation: list[Message], finished: bool) -> list[int]:
        if not self.use_chat:
            return self._ids("".join(f"\n[{m['role']}] {m['content']}" for m in observation) + "\n")
        closing = self.turn_end
        if finished and closing.startswith(self.eos_text):
            closing = closing[len(self.eos_text) :]  # the policy already produced the end-of-turn token
        head = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _PLACEHOLDER}]
        after = self._render(head + observation, generation_prompt=True)
        rest = after[after.rindex(_PLACEHOLDER) + len(_PLACEHOLDER) :]
        if not rest.startswith(self.turn_end):
            raise ValueError(f"chat template closes an assistant turn inconsistently: {rest[:40]!r}")
        return self._ids(closing + rest[len(self.turn_end) :])

    def _placeholders(self, messages: list[Message], first: list) -> tuple[list[Message], list]:
        """``messages`` with each picture's placeholder text before its message's content (``first``: pictures
        of the first user message, the problem's), and every picture in order, as RGB images."""
        shown, pictures = [], []
        opening = next((i for i, m in enumerate(messages) if m.get("role") == "user"), 0)
        for i, message in enumerate(messages):
            own = [*(first if i == opening else ()), *message.get("images", ())]
            message = {k: v for k, v in message.items() if k != "images"}
            if own:
                if self.images is None:
                    raise UserError(
                        "an environment message shows a picture; the policy takes text only (an environment task "
                        "whose observations carry images declares modalities = TEXT_AND_IMAGES)"
                    )
                pictures += [rgb_image(p, f"{message.get('role')} message picture {k}") for k, p in enumerate(own)]
                if self.image_parts:  # the processor's template writes each picture's placeholder
                    text = {"type": "text", "text": message["content"]}
                    message["content"] = [{"type": "image"}] * len(own) + [text]
                else:
                    message["content"] = self.images.placeholders(len(own)) + message["content"]
            shown.append(message)
        return shown, pictures

    def check_pictures(self, problem: Problem, episode: list[int], observation: list[int]) -> None:
        """A UserError when an episode's ids so far and the next observation's show more pictures than a Hugging
        Face vision-language policy's ``model.images.max_per_prompt`` (its next turn's prompt would)."""
        limit = getattr(self.images, "max_images", None)
        shown = sum(len(ids.pixels) for ids in (episode, observation) if isinstance(ids, ImageIds))
        if limit is not None and shown > limit:
            raise UserError(
                f"an episode of {problem.task} problem {problem.split}/{problem.seed} shows {shown} pictures, more "
                f"than model.images.max_per_prompt ({limit})"
            )

    def _with_pictures(self, ids: list[int], pictures: list) -> list[int]:
        return self.images.prompt(ids, pictures) if pictures else ids
