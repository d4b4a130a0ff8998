"""LLM-as-judge rewards (term ``judge``): a judge model scores a response against a rubric.

* ``pointwise``: the judge ends with ``Score: N`` on a ``score_min``–``score_max`` scale; the reward is
  ``(N - score_min) / (score_max - score_min)`` (Zheng et al. 2023, "Judging LLM-as-a-Judge", single-answer
  grading).
* ``pairwise``: the judge compares the response with the task's reference and ends with ``[[A]]``,
  ``[[B]]`` or ``[[C]]`` (tie), the MT-Bench pairwise format; the response's preference is 1 for a win,
  0.5 for a tie, 0 for a loss. LLM judges favour whichever answer is shown first (position bias; Zheng
  et al. 2023 judge both orders and call a tie when they disagree). With ``swap_positions`` (the
  default) each pair is judged twice, the response as A and then as B, both prompts in one batched call,
  and the reward is the mean of the two preferences. Pairs whose two verdicts differ are counted
  (``JudgeSource.position_inconsistent``, step metric ``judge_position_inconsistent``) but keep
  their averaged reward.

The judge is a local checkpoint (``backend: local``, loaded by :func:`polyrl.policy.loading.load_policy`
and sampled greedily) or any OpenAI-compatible endpoint (``backend: openai`` through the ``openai``
client). Identical judgments are cached (key: hash of mode, order of the pair, rubric, prompt, response,
reference); endpoint calls run ``max_concurrency`` at a time, each with a timeout and ``retries``
retries. A verdict that cannot be parsed, a refusal, a timeout or an exhausted retry budget (in either
order of a swapped pair) is a zero reward with a reason, counted in the metrics — never an exception.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from polyrl.errors import UserError

if TYPE_CHECKING:
    import torch

_SCORE_RE = re.compile(r"score\s*[:=]\s*\**\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_PAIR_RE = re.compile(r"\[\[\s*([ABC])\s*\]\]")


class JudgeConfig(BaseModel):
    """An LLM judge and the rubric it grades with."""

    model_config = ConfigDict(extra="forbid")

    rubric: str = Field(
        description="Rubric file (Markdown or YAML text, e.g. configs/rubrics/correct_and_concise.md)."
    )
    mode: Literal["pointwise", "pairwise"] = Field(
        "pointwise", description="Score one response, or prefer it over the reference."
    )
    backend: Literal["openai", "local"] = Field(
        "openai", description="An OpenAI-compatible endpoint, or a local checkpoint."
    )
    model: str = Field(
        description="Model name at the endpoint; with backend local, any model polyrl loads: a directory, a preset, a .gguf file, a Hub id ('tiny' for the embedded model)."
    )
    revision: str | None = Field(
        None,
        description="Backend local with a Hub id: the branch, tag or commit (a run records the commit it loaded).",
    )
    base_url: str | None = Field(None, description="Endpoint URL (openai backend), e.g. http://127.0.0.1:8000/v1.")
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="Environment variable holding the API key ('EMPTY' is sent when unset)."
    )
    score_min: float = Field(1, description="Lowest score on the rubric's scale (pointwise).")
    score_max: float = Field(10, description="Highest score on the rubric's scale (pointwise).")
    max_concurrency: int = Field(8, ge=1, description="Endpoint calls in flight at once.")
    timeout_s: float = Field(30.0, gt=0, description="Seconds per endpoint call before it counts as a timeout.")
    retries: int = Field(2, ge=0, description="Retries of a failed call (exponential backoff from 0.5 s).")
    max_tokens: int = Field(256, ge=1, description="Longest judge answer in tokens.")
    cache: bool = Field(True, description="Reuse judgments of identical (rubric, prompt, response).")
    swap_positions: bool = Field(
        True,
        description="Pairwise: judge each pair in both orders and average the two (cancels position bias; two calls per sample).",
    )

    @model_validator(mode="after")
    def _scale(self):
        if self.score_max <= self.score_min:
            raise ValueError(f"score_max {self.score_max} must be above score_min {self.score_min}")
        if self.revision is not None and self.backend != "local":
            raise ValueError("revision applies to a local judge's Hub id (backend: local); an endpoint serves its own")
        return self


def load_rubric(path: str | Path) -> str:
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise UserError(f"cannot read rubric {str(path)!r}: {exc.strerror or exc}") from None
    if not text:
        raise UserError(f"rubric {str(path)!r} is empty")
    return text


def judge_prompt(
    config: JudgeConfig, rubric: str, prompt: str, response: str, reference: str | None, swapped: bool = False
) -> str:
    """The judge's prompt; pairwise, the response is A and the reference B (``swapped``: the other way round)."""
    if config.mode == "pointwise":
        return (
            f"{rubric}\n\n## Problem\n{prompt}\n\n## Response\n{response}\n\n"
            f"Grade the response with the rubric. End with a line `Score: N`, N from "
            f"{config.score_min:g} to {config.score_max:g}."
        )
    a, b = (reference or "", response) if swapped else (response, reference or "")
    return (
        f"{rubric}\n\n## Problem\n{prompt}\n\n## Response A\n{a}\n\n## Response B\n{b}\n\n"
        "Which response is better under the rubric? End with [[A]], [[B]] or [[C]] for a tie."
    )


def parse_verdict(config: JudgeConfig, text: str | None) -> tuple[float, str | None]:
    """``(reward in [0, 1], failure reason or None)`` from the judge's answer; the last verdict counts."""
    if not text or not text.strip():
        return 0.0, "empty_verdict"
    if config.mode == "pairwise":
        found = _PAIR_RE.findall(text)
        if not found:
            return 0.0, "unparseable_verdict"
        return {"A": 1.0, "B": 0.0, "C": 0.5}[found[-1]], None
    found = _SCORE_RE.findall(text)
    if not found:
        return 0.0, "unparseable_verdict"
    score = float(found[-1])
    if not config.score_min <= score <= config.score_max:
        return 0.0, "score_out_of_range"
    return (score - config.score_min) / (config.score_max - config.score_min), None


class OpenAIJudgeClient:
    """Chat completions at an OpenAI-compatible endpoint, with a timeout and retries per call."""

    def __init__(self, config: JudgeConfig):
        try:
            import openai
        except ImportError:
            raise UserError("the openai judge backend needs the openai package: pip install openai") from None
        if not config.base_url and not os.environ.get(config.api_key_env):
            raise UserError(f"judge backend 'openai' needs reward.judge_source.base_url or ${config.api_key_env}")
        self.openai = openai
        self.config = config
        self.client = openai.OpenAI(
            base_url=config.base_url,
            api_key=os.environ.get(config.api_key_env) or "EMPTY",
            timeout=config.timeout_s,
            max_retries=0,
        )

    def complete(self, prompt: str) -> tuple[str | None, str | None]:
        """``(answer text, failure reason)``."""
        reason = "error"
        for attempt in range(self.config.retries + 1):
            if attempt:
                time.sleep(0.5 * 2 ** (attempt - 1))
            try:
                out = self.client.chat.completions.create(
                    model=self.config.model,
                    messages=[{"role": "user", "content": prompt}],
                    temperature=0.0,
                    max_tokens=self.config.max_tokens,
                )
                choice = out.choices[0] if out.choices else None
                if choice is None or choice.message is None:
                    return None, "empty_verdict"
                if getattr(choice.message, "refusal", None):
                    return None, "refused"
                return choice.message.content, None
            except self.openai.APITimeoutError:
                reason = "timeout"
            except self.openai.APIStatusError as exc:
                reason = f"http_{exc.status_code}"
                if exc.status_code < 500 and exc.status_code != 429:
                    break  # a client error will not go away on retry
            except (self.openai.APIError, ValueError, AttributeError, TypeError):
                reason = "error"
        return None, reason

    def complete_many(self, prompts: list[str]) -> list[tuple[str | None, str | None]]:
        with ThreadPoolExecutor(self.config.max_concurrency) as pool:
            return list(pool.map(self.complete, prompts))


class LocalJudgeClient:
    """A local causal LM (any path load_policy accepts), greedy, batched."""

    def __init__(self, config: JudgeConfig, device: torch.device | str):
        """``device``: where the judge model runs (the run's placement's)."""
        from polyrl.policy import TransformersBackend
        from polyrl.policy.loading import ModelConfig, load_policy
        from polyrl.policy.model_files import model_positions
        from polyrl.policy.prompts import PromptBuilder

        model = ModelConfig(path=config.model, revision=config.revision)
        self.policy = load_policy(model, device=device)
        self.backend = TransformersBackend(self.policy.model, self.policy.tokenizer, device=self.policy.device)
        self.config = config
        self.positions = model_positions(self.policy.model)
        """The judge model's context (a VLM's from its text config), None where unlimited."""
        self.prompts = PromptBuilder(self.policy.tokenizer, images=self.policy.image_input)
        """The judge's prompts as one user message through the model's chat template (a VLM's processor's)."""

    def complete_many(self, prompts: list[str]) -> list[tuple[str | None, str | None]]:
        ids = [self.prompts.text_ids(p) for p in prompts]
        fits = [self.positions is None or len(x) + self.config.max_tokens <= self.positions for x in ids]
        out: list[tuple[str | None, str | None]] = [(None, "judge_prompt_too_long")] * len(ids)
        todo = [i for i, ok in enumerate(fits) if ok]
        if not todo:
            return out
        try:
            gens = self.backend.generate([ids[i] for i in todo], max_new_tokens=self.config.max_tokens, greedy=True)
        except Exception as exc:
            warnings.warn(f"local judge failed on {len(todo)} prompts: {exc!r}", stacklevel=2)
            return [(None, "judge_error") for _ in ids]
        for i, g in zip(todo, gens):
            out[i] = (g.text, None)
        return out


@dataclass(frozen=True)
class Judgment:
    """One sample's judge reward in [0, 1], its failure reason, and whether a swapped pair's two verdicts differed."""

    value: float
    reason: str | None = None
    position_inconsistent: bool = False


class JudgeSource:
    """Scores (prompt, response[, reference]) triples with the configured judge; caches identical judgments.

    Counters: ``calls`` (judge prompts sent), ``position_checked`` (swapped pairs with both verdicts
    parsed) and ``position_inconsistent`` (those whose two verdicts prefer the response differently,
    e.g. ``[[A]]`` in both orders), over every sample scored, cached ones included.
    """

    def __init__(self, config: JudgeConfig, device: torch.device | str, client=None):
        self.config = config
        self.rubric = load_rubric(config.rubric)
        if client is None:
            client = OpenAIJudgeClient(config) if config.backend == "openai" else LocalJudgeClient(config, device)
        self.client = client  # anything with complete_many(prompts) -> [(text, failure reason)]
        self.cache: dict[str, tuple[float, str | None]] = {}
        self.calls = 0
        self.position_checked = 0
        self.position_inconsistent = 0

    @property
    def orders(self) -> tuple[bool, ...]:
        """``swapped`` flags each sample is judged with: (False, True) for swapped pairwise, else (False,)."""
        return (False, True) if self.config.mode == "pairwise" and self.config.swap_positions else (False,)

    def key(self, prompt: str, response: str, reference: str | None, swapped: bool = False) -> str:
        order = "reference_first" if swapped else "response_first"
        blob = "\x00".join([self.config.mode, order, self.rubric, prompt, response, reference or ""])
        return hashlib.sha256(blob.encode()).hexdigest()

    def judge(self, prompts: list[str], responses: list[str], references: list[str | None]) -> list[Judgment]:
        """One :class:`Judgment` per sample; every uncached prompt (both orders of a pair) goes in one batch."""
        orders = self.orders
        keys = [[self.key(p, r, ref, s) for s in orders] for p, r, ref in zip(prompts, responses, references)]
        todo = {}
        for ks, p, r, ref in zip(keys, prompts, responses, references):
            for k, swapped in zip(ks, orders):
                if k not in todo and not (self.config.cache and k in self.cache):
                    todo[k] = judge_prompt(self.config, self.rubric, p, r, ref, swapped)
        answers = self.client.complete_many(list(todo.values())) if todo else []
        self.calls += len(todo)
        fresh = {}
        for k, (text, reason) in zip(todo, answers):
            fresh[k] = (0.0, reason) if reason else parse_verdict(self.config, text)
            # failures are not cached: the same pair is asked again next time
            if self.config.cache and fresh[k][1] is None:
                self.cache[k] = fresh[k]
        out = []
        for ks in keys:
            verdicts = [fresh[k] if k in fresh else self.cache[k] for k in ks]
            reason = next((r for _, r in verdicts if r is not None), None)
            if reason is not None:  # either order failing fails the sample
                out.append(Judgment(0.0, reason))
                continue
            # the verdict is A's share; swapped, the response is B
            prefs = [1.0 - v if swapped else v for (v, _), swapped in zip(verdicts, orders)]
            out.append(Judgment(sum(prefs) / len(prefs), None, len(prefs) == 2 and prefs[0] != prefs[1]))
        if len(orders) == 2:
            self.position_checked += sum(j.reason is None for j in out)
            self.position_inconsistent += sum(j.position_inconsistent for j in out)
        return out

    def score(
        self, prompts: list[str], responses: list[str], references: list[str | None]
    ) -> list[tuple[float, str | None]]:
        return [(j.value, j.reason) for j in self.judge(prompts, responses, references)]
