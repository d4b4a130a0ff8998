"""A run's sequences fit its model's positions: checked when the config is loaded (the embedded model, whose
positions are in the config) and when the run is built (a real model's ``max_position_embeddings``, and the
prompts and SFT examples of the task mix), before any training starts.

Without it ``rl.max_new_tokens=100000`` on a 512-position model ran for hours (nothing stops a completion
before its budget but EOS), and ``model.tiny.max_positions=16`` trained on prompts of 40 tokens. A model with
learned positions (GPT-2's ``wpe``) fails outright past them; a RoPE model runs on, at positions it never
saw in training.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polyrl.envs import is_environment
from polyrl.envs.env_registry import ENV_PREFIX
from polyrl.errors import UserError
from polyrl.policy.loading import TINY
from polyrl.policy.model_files import model_positions

SAMPLED_PROBLEMS = 8
"""Problems per task, split and difficulty whose prompts are measured when the run is built (each prompt is
checked again when it is built: see ``PromptBuilder.limit``)."""


def response_budgets(config) -> dict[str, int]:
    """The most tokens each kind of response of the run may take, by the setting that sets it."""
    out = {"rl.max_new_tokens": config.rl.max_new_tokens}
    if config.eval.max_new_tokens is not None:
        out["eval.max_new_tokens"] = config.eval.max_new_tokens
    if config.selfplay.enabled and config.selfplay.max_new_tokens is not None:
        out["selfplay.max_new_tokens"] = config.selfplay.max_new_tokens
    if any(t.name.startswith(ENV_PREFIX) or t.harness is not None for t in config.tasks):
        out["env.max_episode_tokens"] = config.env.max_episode_tokens
    return out


def single_turn_budget(config) -> tuple[str, int]:
    """The longest single-turn completion of the run and its setting: every single-turn prompt leaves room for it."""
    budgets = {k: v for k, v in response_budgets(config).items() if k != "env.max_episode_tokens"}
    name = max(budgets, key=budgets.__getitem__)
    return name, budgets[name]


def check_budgets(budgets: dict[str, int], positions: int, where: str) -> None:
    """ValueError unless each response budget leaves at least one position for the prompt."""
    for name, tokens in budgets.items():
        if tokens >= positions:
            raise ValueError(
                f"{name}={tokens} does not fit the model's {positions} positions ({where}), which hold the prompt "
                f"and the response together: lower {name}"
            )


def check_run_lengths(config, policy, prompts, mix) -> None:
    """UserError unless the run's responses, sampled prompts and SFT examples fit the policy's positions; from
    here on every prompt built is checked too (``prompts.limit``). ``mix``: the run's ``TaskMix``."""
    positions = model_positions(policy.model)
    if positions is None:
        return
    where = (
        "model.tiny.max_positions" if config.model.path == TINY else f"max_position_embeddings of {config.model.path}"
    )
    try:
        check_budgets(response_budgets(config), positions, where)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    name, budget = single_turn_budget(config)
    prompts.limit(positions - budget, f"the model's {positions} positions ({where}) less {name}={budget}")
    single_turn = {n: t for n, t in mix.tasks.items() if not is_environment(t)}
    held_out = mix.eval_tasks()
    for n, task in single_turn.items():
        for split, difficulty in (("train", mix.difficulty(n)), ("eval", held_out[n][1])):
            for seed in range(SAMPLED_PROBLEMS):
                prompts.ids(task.generate(seed, difficulty, split=split))
    if config.sft.enabled and config.sft.steps:
        references = {n: t for n, t in single_turn.items() if mix.has_references[n]}
        _check_sft_examples(config, policy, prompts, mix, references, positions, where)


def _check_sft_examples(config, policy, prompts, mix, tasks: dict[str, Any], positions: int, where: str) -> None:
    from polyrl.train.sft_data import reference_batch

    if not tasks:
        return
    rng = np.random.default_rng(config.seed)
    eos = policy.tokenizer.eos_token_id
    examples = reference_batch(tasks, mix.sft_difficulty, prompts, eos, rng, SAMPLED_PROBLEMS * len(tasks))
    longest = max((len(e[0]) + len(e[1]) for e in examples), default=0)
    if longest > positions:
        raise UserError(
            f"an SFT example (prompt and reference solution) takes {longest} tokens, more than the model's "
            f"{positions} positions ({where}): use a model with more positions or easier sft.difficulty"
        )
