"""How fast does each critic loss learn the value of a fixed policy? MSE vs HL-Gauss vs two-hot, off-policy
of RL noise: rollouts of one warm-started policy are collected once, then critics are fit on them.

    python benchmarks/critic_fit.py --model runs/ppo_critic/runs/sft/seed0/sft_model [--steps 200] [--lrs 5e-4,2e-3]

The policy never changes, so the only question is the value regression itself. Every ``--eval-every``
steps each critic is scored on held-out rollouts (eval-split problems) by the explained variance of its
per-token values against the Monte-Carlo return (what ``value_explained_variance`` logs during RL, with
γ = λ = 1), and of its value at the first response token against the episode's outcome (how well it
knows, before answering, whether the policy will solve the problem).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from machine import cpu_model  # benchmarks/machine.py (scripts run from benchmarks/)

from polyrl.cli.train import default_config_path
from polyrl.critic import Critic, CriticConfig
from polyrl.device import HOST
from polyrl.forward import collate
from polyrl.policy import PromptBuilder, TransformersBackend, load_policy
from polyrl.policy.loading import ModelConfig
from polyrl.rewards import compute_rewards
from polyrl.tasks import get_task
from polyrl.train.config import load_config


def rollouts(policy, prompts, tasks, reward, split: str, batches: int, seed: int, group: int = 8, per_batch: int = 16):
    backend = TransformersBackend(policy.model, policy.tokenizer, device=HOST)
    rng = np.random.default_rng(seed)
    names = list(tasks)
    out = []
    for _ in range(batches):
        problems = [
            tasks[names[k]].generate(int(rng.integers(2**62)), "easy", split=split)
            for k in rng.integers(len(names), size=per_batch)
        ]
        ids = [prompts.ids(p) for p in problems for _ in range(group)]
        gens = backend.generate(ids, max_new_tokens=24)
        for k, g in enumerate(gens):
            p = problems[k // group]
            r = compute_rewards(reward, tasks[p.task], p, g.text, len(g.completion_ids), g.finished, 24)
            out.append((g.prompt_ids, g.completion_ids, r.total))
    return out


def batch_of(rows, pad_id):
    return collate([(p, c) for p, c, _ in rows], pad_id), torch.tensor([r for _, _, r in rows], dtype=torch.float32)


@torch.no_grad()
def evaluate(critic: Critic, test, pad_id) -> dict[str, float]:
    batch, rewards = batch_of(test, pad_id)
    values = critic.values_from(critic._outputs(batch)).cpu()
    mask = batch.loss_mask.bool()
    returns = rewards.unsqueeze(1).expand_as(values)  # γ = λ = 1: every token's return is the outcome
    v, ret = values[mask], returns[mask]
    first = mask.float().argmax(1)
    v0 = values[torch.arange(len(first)), first]
    ev = lambda pred, target: float(1 - (target - pred).var() / target.var())
    return {"ev_tokens": ev(v, ret), "ev_first": ev(v0, rewards), "value_mean": float(v.mean())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a warm-started policy directory (e.g. an SFT run's sft_model)")
    p.add_argument("--steps", type=int, default=200, help="critic updates per run (batches of 128 sequences)")
    p.add_argument("--train-batches", type=int, default=40, help="rollout batches (16 problems x 8) to fit on")
    p.add_argument("--test-batches", type=int, default=8, help="held-out rollout batches")
    p.add_argument("--losses", default="mse,hl_gauss,two_hot")
    p.add_argument("--lrs", default="5e-4,2e-3")
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not Path(args.model).is_dir():
        p.error(
            f"--model {args.model!r} is not a directory (run `polyrl experiment critic` first, or point at any SFT model)"
        )
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = load_config(default_config_path(), [])
    policy = load_policy(ModelConfig(path=args.model), device=HOST)
    policy.model.eval()
    prompts = PromptBuilder(policy.tokenizer, cfg.prompt)
    tasks = {s.name: get_task(s.name) for s in cfg.tasks}
    t0 = time.perf_counter()
    train = rollouts(policy, prompts, tasks, cfg.reward, "train", args.train_batches, args.seed)
    test = rollouts(policy, prompts, tasks, cfg.reward, "eval", args.test_batches, args.seed + 1)
    success = np.mean([r for *_, r in train])
    print(
        f"Machine: {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, Python {platform.python_version()}.\n"
    )
    print(
        f"Policy {args.model}; {len(train)} training and {len(test)} held-out rollouts of the default suite "
        f"(mean reward {success:.3f}), collected in {time.perf_counter() - t0:.0f} s; critic batches of 128, "
        f"{args.steps} updates, AdamW, grad clip 1.0, zero-initialised head on a copy of the policy trunk.\n"
    )
    checkpoints = list(range(args.eval_every, args.steps + 1, args.eval_every))
    header = ["loss", "lr", *(f"EV tokens @{s}" for s in checkpoints), "EV first token (final)", "s"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|")
    pad = policy.tokenizer.pad_token_id
    for loss in args.losses.split(","):
        for lr in (float(x) for x in args.lrs.split(",")):
            torch.manual_seed(args.seed)
            critic = Critic(CriticConfig(loss=loss, lr=lr), policy.model, device=HOST)
            rng = np.random.default_rng(args.seed)
            evs, t0 = [], time.perf_counter()
            for step in range(1, args.steps + 1):
                rows = [train[i] for i in rng.choice(len(train), size=128, replace=False)]
                batch, rewards = batch_of(rows, pad)
                returns = rewards.unsqueeze(1).expand(-1, batch.loss_mask.shape[1]).contiguous()
                critic.update(batch, returns)
                if step in checkpoints:
                    evs.append(evaluate(critic, test, pad))
            row = [
                loss,
                f"{lr:g}",
                *(f"{e['ev_tokens']:.3f}" for e in evs),
                f"{evs[-1]['ev_first']:.3f}",
                f"{time.perf_counter() - t0:.0f}",
            ]
            print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
