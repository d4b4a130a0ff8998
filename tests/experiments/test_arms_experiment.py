"""``polyrl experiment arms``: arms from a config's strategies against a baseline, end to end at CI size."""

import json
import shutil

from polyrl.cli import run as cli

ARMS = """
model: {path: tiny}
prompt: {field: question}
threads: 1
tensorboard: false
tasks:
  - {name: sort_digits, difficulty: 0.0}
  - {name: boolean_evaluation, difficulty: 0.0}
sft: {steps: 20, batch_size: 16}
rl: {steps: 3, prompts_per_step: 4, group_size: 4, max_new_tokens: 16}
eval: {problems_per_task: 8, pass_k: 1}
strategies:
  "off": {rl: {task_normalize: false}}
  "on": {rl: {task_normalize: true}}
"""


def test_arms_report_has_cis_paired_differences_gradient_share_and_resumes(tmp_path, capsys):
    config = tmp_path / "arms.yaml"
    config.write_text(ARMS)
    out = tmp_path / "out"
    args = ["experiment", "arms", "--config", str(config), "--baseline", "off", "--seeds", "2", "--share-sft"]
    assert cli([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "budget: 1 SFT run(s) × 20 steps + 4 RL run(s) × 3 steps" in printed
    results = json.loads((out / "results.json").read_text())
    on = results["strategies"]["on"]
    assert results["hard"] == {} and "hard" not in on  # no eval_difficulty: no hard split
    assert set(on["vs_baseline"]["easy"]["mean"]) >= {"mean", "low", "high", "mde", "n"}
    assert on["vs_baseline"]["easy"]["mean"]["n"] == 2
    assert abs(sum(mean for mean, _ in on["gradient_share"].values()) - 1.0) < 1e-9
    report = (out / "report.md").read_text()
    for heading in ("## Statistics", "## Gradient share per task", "## Verdict", "MDE"):
        assert heading in report
    assert "Held-out, hard split" not in report
    for png in ("heldout.png", "differences.png", "gradient_share.png"):
        assert (out / png).stat().st_size > 0
    assert (out / "runs" / "on" / "seed1" / "wall_time.json").exists()

    # a rerun skips every finished run and estimates nothing left
    assert cli([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "RL with" not in printed and "budget: 0 SFT run(s)" in printed and "4 finished run(s) skipped" in printed


def test_budget_only_times_a_few_steps_and_trains_nothing(tmp_path, capsys):
    config = tmp_path / "arms.yaml"
    config.write_text(ARMS)
    out = tmp_path / "out"
    args = ["experiment", "arms", "--config", str(config), "--baseline", "off", "--seeds", "3", "--budget"]
    assert cli([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "budget: 3 SFT run(s) × 20 steps at" in printed and "6 RL run(s) × 3 steps at" in printed
    assert "quick timing of 3 steps" in printed
    assert not (out / "runs").exists()


def test_unknown_baseline_exits_2(tmp_path, capsys):
    config = tmp_path / "arms.yaml"
    config.write_text(ARMS)
    rc = cli(["experiment", "arms", "--config", str(config), "--baseline", "nope", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "--baseline 'nope' is not one of the arms: off, on" in capsys.readouterr().err


def test_a_dumped_config_of_built_in_tasks_loads_again():
    # the runner rebuilds each arm's config from the base config's dump, where a built-in task has dataset: None
    from polyrl.train.config import load_config

    dumped = load_config(None, base={"model": {"path": "tiny"}, "tasks": [{"name": "sort_digits"}]}).model_dump(
        mode="json"
    )
    assert dumped["tasks"][0]["dataset"] is None
    assert load_config(None, base=dumped).tasks[0].dataset is None


def test_base_names_a_training_config_that_the_experiment_file_overrides(tmp_path, capsys):
    from polyrl.experiments.curriculum import plan_experiment, read_experiment_config

    (tmp_path / "job.yaml").write_text(ARMS.split("strategies:")[0])
    sub = tmp_path / "claims"
    sub.mkdir()
    (sub / "exp.yaml").write_text("base: ../job.yaml\nrl: {lr: 0.001}\nstrategies:\n  a: {}\n  b: {rl: {steps: 5}}\n")
    raw, strategies = read_experiment_config(sub / "exp.yaml")
    assert raw["rl"] == {"steps": 3, "prompts_per_step": 4, "group_size": 4, "max_new_tokens": 16, "lr": 0.001}
    assert raw["sft"] == {"steps": 20, "batch_size": 16} and set(strategies) == {"a", "b"}
    plan = plan_experiment(sub / "exp.yaml", 1, None, tmp_path / "o", hard_difficulty=None)
    assert plan.config(plan.strategies[1], 0).rl.steps == 5 and plan.config(plan.strategies[0], 0).rl.lr == 0.001

    (sub / "bad.yaml").write_text("base: ../missing.yaml\n")
    (sub / "nested.yaml").write_text("base: exp.yaml\n")
    (sub / "typed.yaml").write_text("base: [job.yaml]\n")
    for name, message in [
        ("bad.yaml", "cannot read base config"),
        ("nested.yaml", "is a training config: no strategies: or base: in it"),
        ("typed.yaml", "base must be the path of a training config"),
    ]:
        args = ["experiment", "arms", "--config", str(sub / name), "--baseline", "a", "--out", str(tmp_path / "o")]
        assert cli(args) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1


def test_arms_in_parallel_processes_prune_finished_checkpoints_and_budget_per_arm_steps(tmp_path, capsys):
    config = tmp_path / "arms.yaml"
    config.write_text(
        ARMS.replace('"on": {rl: {task_normalize: true}}', '"on": {rl: {task_normalize: true, steps: 1}}')
    )
    out = tmp_path / "out"
    args = ["experiment", "arms", "--config", str(config), "--baseline", "off", "--seeds", "2", "--out", str(out)]
    assert cli([*args, "--seeds", "1"]) == 0  # seed 0 finished without pruning: it keeps its checkpoints
    assert (out / "runs" / "off" / "seed0" / "checkpoints").exists()
    capsys.readouterr()
    assert cli([*args, "--jobs", "2", "--prune-checkpoints"]) == 0
    printed = capsys.readouterr().out
    # the arms' own rl.steps: seed 1's (3 + 1) steps; seed 0's finished runs are skipped, then pruned
    assert "2 RL run(s) of 4 steps in all" in printed and "training seeds 1 in 1 worker process\n" in printed
    for arm, steps in (("off", 3), ("on", 1)):
        for seed in (0, 1):
            run = out / "runs" / arm / f"seed{seed}"
            assert not (run / "checkpoints").exists()  # pruned: the optimizer states of a finished run
            assert not (run / "sft_model").exists()  # pruned: its copy of the warm start
            assert (run / "eval" / "after_rl.json").exists() and (run / "final_model" / "config.json").exists()
            rl = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            assert max(r["step"] for r in rl if r.get("stage") == "rl") == steps
    for seed in (0, 1):  # every arm of the seed finished: its warm start's checkpoint goes too, its model stays
        sft = out / "runs" / "sft" / f"seed{seed}"
        assert not (sft / "checkpoints").exists() and (sft / "CHECKPOINTS_PRUNED").exists()
        assert (sft / "sft_model" / "config.json").exists() and (sft / "eval" / "after_sft.json").exists()
    assert cli([*args, "--prune-checkpoints"]) == 0  # a rerun skips the finished seeds whole
    assert "RL with" not in capsys.readouterr().out
    shutil.rmtree(out / "runs" / "on" / "seed1")  # an arm to train again, its warm start's checkpoint gone
    for extra in ([], ["--budget"], ["--jobs", "2"]):  # refused before anything trains, the budget included
        assert cli([*args, "--prune-checkpoints", *extra]) == 2
        err = capsys.readouterr().err
        assert "lost its checkpoint to --prune-checkpoints" in err and len(err.strip().splitlines()) == 1
    assert not (out / "runs" / "on" / "seed1").exists()  # nothing half-made
    assert cli([*args, "--jobs", "0"]) == 2
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err


def test_a_finished_run_is_freed_before_the_next_is_built(tmp_path, monkeypatch):
    # on a real model every run holds GBs: the runner must not keep the last run alive while training the next
    import weakref

    from polyrl.experiments import curriculum

    config = tmp_path / "arms.yaml"
    config.write_text(ARMS.replace("steps: 20", "steps: 2").replace("steps: 3", "steps: 1"))
    plan = curriculum.plan_experiment(config, 1, None, tmp_path / "out", hard_difficulty=None)
    alive, built = [], curriculum.train_from_warm_start

    def tracked(cfg, sft):
        alive.append(sum(r() is not None for r in refs))  # runs still in memory when this one starts
        trainer = built(cfg, sft)
        refs.append(weakref.ref(trainer))
        return trainer

    refs: list = []
    monkeypatch.setattr(curriculum, "train_from_warm_start", tracked)
    curriculum.train_all(plan, log=lambda m: None)
    curriculum.free_memory()
    assert alive == [0, 0] and [r() for r in refs] == [None, None]
