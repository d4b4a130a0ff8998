"""The scoring stage on three hand-written completions: one reward function in polyrl's signature and in TRL's,
side by side, and one that overruns its time limit (docs/rewards.md).

    PYTHONPATH=examples python examples/score_demo.py
"""

from polyrl.device import HOST
from polyrl.rewards import RewardConfig, RewardScorer, score
from polyrl.rollout import Trajectory
from polyrl.tasks import get_task

task = get_task("addition")
problem = task.generate(0, "easy")  # 22+85=
texts = ["<answer>107</answer>", "The sum is <answer>107</answer>.", "<answer>106</answer>"]

for fn in ("rewards_demo:brevity", "rewards_demo:brevity_trl", "rewards_demo:sleepy"):
    trajs = [Trajectory("addition", 0, problem, [0], [0] * len(t), t, True, 0.0, {}, None) for t in texts]
    config = RewardConfig(terms=[{"fn": fn, "weight": 1.0}], term_timeout=0.5)
    score(
        trajs, {"addition": task}, config, max_new_tokens=16, batched=RewardScorer(config, ["addition"], device=HOST)
    )
    print(fn)
    for t in trajs:
        print(f"  {t.text!r:36} reward {t.reward:+.2f}  terms {t.reward_terms}  failures {t.reward_failures}")
