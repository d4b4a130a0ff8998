"""verifiers v1 tasksets as polyrl tasks (``vf/<module>:<Taskset>``): played through the harness endpoint,
scored by the taskset's own ``@vf.reward`` functions, each reported as a reward term; a few RL steps train
on one and evaluate it. Skipped without verifiers (CI installs polyrl[verifiers])."""

import json
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1", reason="verifiers is not installed (pip install 'polyrl[verifiers]')")

from harness_rollouts import scored_rollout

from polyrl.errors import UserError
from polyrl.rollout.harness.vf_tasks import VerifiersTask, scored_trace

NAME = "vf/vf_add_taskset:AddTaskset"


def test_problem_k_is_task_k_of_the_taskset():
    task = VerifiersTask(NAME)
    problem = task.generate(11, "easy")
    assert (problem.task, problem.answer, problem.prompt) == (NAME, 3, "3+3=")
    assert task.generate(3, "easy", split="eval").answer == 3


def test_the_tasks_reward_functions_score_a_trace():
    import asyncio

    vf_task = VerifiersTask(NAME).problems.tasks[2]
    trace = scored_trace(vf_task, [{"role": "user", "content": "2+2="}], "4")
    asyncio.run(vf_task.score(trace))
    assert {k: r.score for k, r in trace.rewards.items()} == {"correct": 1.0, "brevity": 0.5}
    assert trace.reward == pytest.approx(1.0 + 0.5 * 0.5) and trace.metrics == {"reply_chars": 1.0}


def test_an_episode_is_rewarded_per_function(scripted, prompts, tiny_tokenizer):
    task = VerifiersTask(NAME)
    backend = scripted(lambda text: "6")
    (t,) = scored_rollout([task.generate(3, "easy")], {NAME: task}, backend, prompts, 1, 16, 384)
    assert t.reward == pytest.approx(1.25) and t.verdict.correct
    assert t.reward_terms == {
        "env_return": 1.25,
        "harness/correct": 1.0,
        "harness/brevity": 0.5,
        "harness/reply_chars": 1.0,
    }
    assert tiny_tokenizer.decode(t.prompt_ids) == "<|system|>Answer with the number.<|user|>3+3=<|assistant|>"


def test_a_name_that_is_no_taskset_is_one_line():
    with pytest.raises(UserError, match="not a verifiers Taskset"):
        VerifiersTask("vf/vf_add_taskset:AddData")


def test_a_few_rl_steps_train_and_evaluate_on_a_taskset(tiny_train_config):
    from polyrl.train.trainer import Trainer

    cfg = tiny_train_config(
        tasks=[{"name": NAME}],
        sft__enabled=False,
        rl__steps=2,
        rl__max_new_tokens=8,
        eval__problems_per_task=2,
        eval__pass_k=1,
        threads=1,
        tensorboard=False,
    )
    results = Trainer(cfg).run()
    rl = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rl if r["stage"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2] and all(r["updates"] > 0 for r in rl)  # brevity varies: signal
    for name in ("correct", "brevity", "reply_chars"):
        assert f"reward_terms/harness/{name}" in rl[0]
    assert set(results["after_rl"]) == {NAME, "mean"}


def test_correct_means_the_heaviest_reward_functions_scored_one(scripted, prompts):
    task = VerifiersTask(NAME)
    (t,) = scored_rollout([task.generate(3, "easy")], {NAME: task}, scripted(lambda text: "7"), prompts, 1, 16, 384)
    assert t.reward == pytest.approx(0.25) and not t.verdict.correct  # brevity alone: a reward, not a success


def test_plain_def_reward_functions_score_an_episode(scripted, prompts):
    name = "vf/vf_plain_taskset:PlainTaskset"
    task = VerifiersTask(name)
    (t,) = scored_rollout([task.generate(3, "easy")], {name: task}, scripted(lambda text: "6"), prompts, 1, 16, 384)
    assert t.info["end_reason"] == "returned" and t.verdict.correct
    assert t.reward == pytest.approx(2.0) and t.reward_terms["harness/correct"] == 1.0
    assert t.reward_terms["harness/reply_chars"] == 1.0
