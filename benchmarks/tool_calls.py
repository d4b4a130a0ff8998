"""How well a model uses an env/ task's tools: greedy episodes on held-out problems, counted per turn.

For each checkpoint given (a preset, a checkpoint directory, e.g. RUN_DIR/sft_model and RUN_DIR/final_model):
the share of policy turns that are a well-formed tool call (parsed in the episode's tool format, arguments
accepted by the tool), tool errors and invalid turns (neither a call nor an answer), the share of episodes that
made at least one good call, that ended with an answer, and success. A model whose chat template has no tool
support is told the tools and the call syntax in the system message (``rollout/chat.py``: ``describe_tools``).

    python benchmarks/tool_calls.py smollm2-135m-instruct RUN_DIR/sft_model RUN_DIR/final_model \\
        --task env/calculator:multiplication --difficulty easy --n 40
"""

from __future__ import annotations

import argparse
import json

import torch


def measure(path: str, task_name: str, difficulty, n: int, max_turns: int, max_new_tokens: int) -> dict:
    from polyrl.envs.registry import EnvConfig, resolve_task
    from polyrl.policy import TransformersBackend
    from polyrl.policy.loading import ModelConfig, load_policy
    from polyrl.policy.prompts import PromptBuilder, PromptConfig
    from polyrl.rollout.dispatch import Sampling, rollout_groups

    policy = load_policy(ModelConfig(path=path))
    env = EnvConfig(max_turns=max_turns)
    task = resolve_task(task_name, env)
    prompts = PromptBuilder(policy.tokenizer, PromptConfig().resolved(path))
    problems = [task.generate(seed, difficulty, split="eval") for seed in range(n)]
    backend = TransformersBackend(policy.model, policy.tokenizer)
    sampling = Sampling(group_size=1, max_new_tokens=max_new_tokens, max_episode_tokens=max_turns * max_new_tokens * 2)
    with torch.no_grad():
        groups = rollout_groups(problems, {task.name: task}, backend, prompts, sampling, greedy=True)
    trajs = [g[0] for g in groups]
    turns = sum(t.info.get("turns", 0) for t in trajs)
    calls = sum(t.info.get("tool_calls", 0) for t in trajs)
    errors = sum(t.info.get("tool_errors", 0) for t in trajs)
    invalid = sum(t.info.get("invalid_actions", 0) for t in trajs)
    answered = sum(t.verdict.reason not in ("max_turns", "token_budget") for t in trajs)
    return {
        "model": path,
        "episodes": len(trajs),
        "turns": turns,
        "good_call_share_of_turns": (calls - errors) / max(turns, 1),
        "tool_error_share_of_turns": errors / max(turns, 1),
        "invalid_share_of_turns": invalid / max(turns, 1),
        "episodes_with_a_good_call": sum(t.info.get("tool_calls", 0) > t.info.get("tool_errors", 0) for t in trajs)
        / len(trajs),
        "episodes_answered": answered / len(trajs),
        "success": sum(bool(t.verdict.correct) for t in trajs) / len(trajs),
        "example": trajs[0].text[:300],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="Presets or checkpoint directories.")
    ap.add_argument("--task", default="env/calculator:multiplication")
    ap.add_argument(
        "--difficulty", default="easy", help="A preset, a knob, or JSON parameters, e.g. '{\"digits_a\": 3}'."
    )
    ap.add_argument("--n", type=int, default=40, help="Held-out problems (eval split seeds 0..n-1).")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(1)
    difficulty = args.difficulty
    if difficulty.startswith("{"):
        difficulty = json.loads(difficulty)
    else:
        try:
            difficulty = float(difficulty)
        except ValueError:
            pass
    rows = [measure(m, args.task, difficulty, args.n, args.max_turns, args.max_new_tokens) for m in args.models]
    for r in rows:
        print(json.dumps(r))
    print(f"\n{args.task} ({args.difficulty}), {args.n} held-out problems, greedy, ≤{args.max_turns} turns\n")
    print("| model | good tool calls / turns | tool errors / turns | invalid turns | episodes with a good call |"
          " answered | success |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cells = [
            r["good_call_share_of_turns"],
            r["tool_error_share_of_turns"],
            r["invalid_share_of_turns"],
            r["episodes_with_a_good_call"],
            r["episodes_answered"],
            r["success"],
        ]
        print(f"| {r['model']} | " + " | ".join(f"{100 * c:.0f}%" for c in cells) + " |")


if __name__ == "__main__":
    main()
