"""How well a model plays env/ tasks: greedy episodes on held-out problems, counted per turn.

For each checkpoint given (a preset, a checkpoint directory, e.g. RUN_DIR/sft_model and RUN_DIR/final_model) and
each environment: the share of policy turns that are a well-formed tool call (parsed in the episode's tool format,
arguments accepted by the tool; "—" for an environment without tools), tool errors and invalid turns (the
environment's ``invalid_actions``: neither a call nor an answer, a move it cannot read; a last turn of that kind
ends the episode at the turn limit instead), the share of episodes that made at least one good call, that ended on
their own (a correct answer, a final answer or move; not the turn or token limit, not an invalid move), and
success; then the reply the model gives most often on its first turn (a copied example or an ignored instruction
shows up there). A model whose chat template has no tool support is told the tools and the call syntax in the
system message (``rollout/chat.py``: ``describe_tools``).

    python benchmarks/tool_calls.py smollm2-135m-instruct RUN_DIR/sft_model \\
        --task 'env/calculator:multiplication={"digits_a": 3, "digits_b": 3}' --task env/wordle --n 20 \\
        [--max-turns 3] [--out runs/tool_calls]

A task is ``NAME`` or ``NAME=DIFFICULTY`` (a preset, a knob, or JSON parameters); ``--difficulty`` is the default.
With ``--out`` every episode's text and counters go to ``DIR/episodes.jsonl`` and the rows to ``DIR/rows.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch

from polyrl.device import HOST

NOT_ENDED = ("max_turns", "attempts_exhausted", "token_budget", "env_error", "invalid_move")
"""End reasons of an episode that did not end on its own answer or final move (env/retry's turn limit is
``attempts_exhausted``; a TextArena game ends at an invalid move)."""


COUNTERS = ("turns", "tool_calls", "tool_errors", "invalid_actions")
"""Per-episode counters of ``Trajectory.info`` summed over a task's episodes."""


def first_turn(tokenizer, trajectory) -> str:
    """The policy's first turn of an episode, whitespace collapsed."""
    start, end = trajectory.turn_spans[0] if trajectory.turn_spans else (0, 0)
    return " ".join(tokenizer.decode(trajectory.response_ids[start:end], skip_special_tokens=True).split())


def parse_difficulty(text: str):
    if text.startswith("{"):
        return json.loads(text)
    try:
        return float(text)
    except ValueError:
        return text


def measure(policy, path: str, task_name: str, difficulty, n: int, max_turns, max_new_tokens: int):
    """One row (a dict of shares) and the episodes (text and counters) of ``task_name`` played by ``policy``."""
    from polyrl.envs.env_registry import EnvConfig
    from polyrl.policy import TransformersBackend
    from polyrl.policy.prompts import PromptBuilder, PromptConfig
    from polyrl.rollout.dispatch import Sampling, rollout_groups
    from polyrl.tasks import resolve_task

    task = resolve_task(task_name, env=EnvConfig(max_turns=max_turns))
    turns_allowed = getattr(task, "max_turns", max_turns or 1)
    prompts = PromptBuilder(policy.tokenizer, PromptConfig().resolved(path))
    problems = [task.generate(seed, difficulty, split="eval") for seed in range(n)]
    probe = task.make_env(problems[0])
    has_tools = bool(probe.tools)
    probe.close()
    backend = TransformersBackend(policy.model, policy.tokenizer, device=HOST)
    sampling = Sampling(
        group_size=1, max_new_tokens=max_new_tokens, max_episode_tokens=turns_allowed * max_new_tokens * 3
    )
    with torch.no_grad():
        groups = rollout_groups(problems, {task.name: task}, backend, prompts, sampling, greedy=True)
    trajs = [g[0] for g in groups]
    turns, calls, errors, invalid = (sum(t.info.get(k, 0) for t in trajs) for k in COUNTERS)
    firsts = Counter(first_turn(policy.tokenizer, t)[:40] for t in trajs)
    first, times = firsts.most_common(1)[0]
    row = {
        "model": path,
        "task": task_name,
        "difficulty": difficulty,
        "episodes": len(trajs),
        "turns_per_episode": turns / len(trajs),
        "tools": has_tools,
        "good_call_share_of_turns": (calls - errors) / max(turns, 1),
        "tool_error_share_of_turns": errors / max(turns, 1),
        "invalid_share_of_turns": invalid / max(turns, 1),
        "episodes_with_a_good_call": sum(t.info.get("tool_calls", 0) > t.info.get("tool_errors", 0) for t in trajs)
        / len(trajs),
        "episodes_ended": sum(t.verdict.reason not in NOT_ENDED for t in trajs) / len(trajs),
        "success": sum(bool(t.verdict.correct) for t in trajs) / len(trajs),
        "first_reply": first,
        "first_reply_count": times,
    }
    episodes = [
        {"model": path, "task": task_name, "seed": seed, "reason": t.verdict.reason, "text": t.text, **t.info}
        for seed, t in enumerate(trajs)
    ]
    return row, episodes


def pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | task | good tool calls / turns | tool errors / turns | invalid turns | episodes with a good call "
        "| ended | success | most frequent first reply |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        escaped = r["first_reply"].replace("|", "\\|").replace("`", "'")
        tool_cells = (
            [pct(r["good_call_share_of_turns"]), pct(r["tool_error_share_of_turns"])] if r["tools"] else ["—", "—"]
        )
        cells = [
            *tool_cells,
            pct(r["invalid_share_of_turns"]),
            pct(r["episodes_with_a_good_call"]) if r["tools"] else "—",
            pct(r["episodes_ended"]),
            pct(r["success"]),
            f"`{escaped}` ({r['first_reply_count']}/{r['episodes']})",
        ]
        lines.append(f"| {r['model']} | {r['task']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="Presets or checkpoint directories.")
    ap.add_argument(
        "--task", action="append", help="NAME or NAME=DIFFICULTY; repeatable (default: env/calculator:multiplication)."
    )
    ap.add_argument(
        "--difficulty", default="easy", help="A preset, a knob, or JSON parameters, e.g. '{\"digits_a\": 3}'."
    )
    ap.add_argument("--n", type=int, default=40, help="Held-out problems (eval split seeds 0..n-1).")
    ap.add_argument("--max-turns", type=int, default=None, help="Policy turns per episode (default: each env's own).")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="Longest policy turn in tokens.")
    ap.add_argument("--out", default=None, help="Directory for episodes.jsonl and rows.jsonl.")
    args = ap.parse_args()
    from transformers.utils import logging as hf_logging

    from polyrl.policy.loading import ModelConfig, load_policy

    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    specs = []
    for spec in args.task or ["env/calculator:multiplication"]:
        name, _, difficulty = spec.partition("=")
        specs.append((name, parse_difficulty(difficulty or args.difficulty)))
    out = Path(args.out) if args.out else None
    if out is not None:  # written task by task, so a run stopped early keeps what it measured
        out.mkdir(parents=True, exist_ok=True)
        for name in ("rows.jsonl", "episodes.jsonl"):
            (out / name).write_text("")
    rows = []
    for path in args.models:
        policy = load_policy(ModelConfig(path=path), device=HOST)
        for name, difficulty in specs:
            row, episodes = measure(policy, path, name, difficulty, args.n, args.max_turns, args.max_new_tokens)
            print(json.dumps(row), flush=True)
            rows.append(row)
            if out is not None:
                with (out / "rows.jsonl").open("a") as f:
                    f.write(json.dumps(row) + "\n")
                with (out / "episodes.jsonl").open("a") as f:
                    f.write("".join(json.dumps(e) + "\n" for e in episodes))
    turns = f"≤{args.max_turns} turns" if args.max_turns else "each env's own turn limit"
    print(f"\n{args.n} held-out problems per task, greedy, {turns}, ≤{args.max_new_tokens} new tokens a turn\n")
    print(markdown(rows))


if __name__ == "__main__":
    main()
