"""``polyrl experiment specialists``: the arms and budgets it builds, its input checks, the composite
specialists' statistics (hand-computed), and the whole command at CI size."""

import json

import pytest
import yaml
from experiment_configs import category_smoke

from polyrl.cli import run as cli
from polyrl.errors import UserError
from polyrl.experiments.specialists import SpecialistsDesign, design_specialists, specialists_summary

CATS = {
    "sort_digits": "sequential",
    "reverse_letters": "sequential",
    "boolean_evaluation": "logic",
    "addition": "arithmetic",
}
TASKS = list(CATS)

SMOKE = category_smoke(rl_steps=4)


def test_the_specialists_share_the_joint_budget_and_leave_one_out_halves_it():
    d = design_specialists(TASKS, ["sort_digits", "reverse_letters", "boolean_evaluation"], 6, CATS, "logic")
    assert d.transfer == ["addition"]
    assert d.arms == {
        "joint": (["sort_digits", "reverse_letters", "boolean_evaluation"], 6),
        "only_sort_digits": (["sort_digits"], 2),
        "only_reverse_letters": (["reverse_letters"], 2),
        "only_boolean_evaluation": (["boolean_evaluation"], 2),
        "loco_others": (["sort_digits", "reverse_letters"], 3),
        "loco_logic": (["boolean_evaluation"], 3),
    }
    plain = design_specialists(
        ["compose/up", "sort_digits"],
        ["compose/up", "sort_digits"],
        4,
        {"compose/up": "compose", "sort_digits": "sequential"},
    )
    assert list(plain.arms) == ["joint", "only_compose_up", "only_sort_digits"] and plain.transfer == []


@pytest.mark.parametrize(
    "train, steps, holdout, message",
    [
        (["sort_digits"], 4, None, "--train needs two or more tasks"),
        (["sort_digits", "sudoku"], 4, None, "--train: 'sudoku' is not a task of the config"),
        (["sort_digits", "sort_digits"], 4, None, "--train names a task twice"),
        (
            ["sort_digits", "reverse_letters", "addition"],
            4,
            None,
            "rl.steps 4 does not split evenly over 3 specialists",
        ),
        (["sort_digits", "addition"], 4, "logic", "--holdout-category 'logic' is not the category of a trained task"),
        (["sort_digits", "reverse_letters"], 4, "sequential", "every trained task is of category 'sequential'"),
        (["sort_digits", "addition"], 6, "arithmetic", None),
        (["sort_digits", "boolean_evaluation"], 2, "logic", None),
    ],
)
def test_bad_designs_are_one_line_errors(train, steps, holdout, message):
    if message is None:
        design_specialists(TASKS, train, steps, CATS, holdout)
        return
    with pytest.raises(UserError) as err:
        design_specialists(TASKS, train, steps, CATS, holdout)
    assert message in str(err.value)


def test_odd_budget_for_leave_one_out_is_refused():
    with pytest.raises(UserError, match=r"rl\.steps 3 is odd"):
        design_specialists(TASKS, ["sort_digits", "boolean_evaluation", "addition"], 3, CATS, "logic")


def test_composite_specialists_and_paired_differences_by_hand():
    d = SpecialistsDesign(["a", "b"], ["c"], 4, {"a": "x", "b": "y"}, holdout="y")
    per = lambda a, b, c: {"a": a, "b": b, "c": c, "mean": [0.0, 0.0]}
    summary = {
        "after_sft_per_seed": {"easy": per([0.2, 0.2], [0.4, 0.4], [0.1, 0.1])},
        "strategies": {
            "joint": {"per_seed": {"easy": per([0.5, 0.3], [0.6, 0.6], [0.3, 0.1])}},
            "only_a": {"per_seed": {"easy": per([0.4, 0.4], [0.4, 0.2], [0.1, 0.3])}},
            "only_b": {"per_seed": {"easy": per([0.2, 0.0], [0.5, 0.7], [0.3, 0.1])}},
            "loco_others": {"per_seed": {"easy": per([0.6, 0.6], [0.5, 0.3], [0.1, 0.1])}},
            "loco_y": {"per_seed": {"easy": per([0.2, 0.2], [0.7, 0.7], [0.1, 0.1])}},
        },
    }
    s = specialists_summary(summary, d)
    # specialists: a by only_a, b by only_b; the transfer task c by the mean of both
    assert s["per_seed"]["specialists"]["a"] == [0.4, 0.4] and s["per_seed"]["specialists"]["b"] == [0.5, 0.7]
    assert s["per_seed"]["specialists"]["c"] == pytest.approx([0.2, 0.2])
    assert s["means_per_seed"]["joint"]["trained"] == pytest.approx([0.55, 0.45])
    assert s["means_per_seed"]["specialists"]["trained"] == pytest.approx([0.45, 0.55])
    diff = s["differences"]["joint − specialists"]
    assert diff["trained"]["mean"] == pytest.approx(0.0) and diff["trained"]["n"] == 2
    assert diff["transfer"]["mean"] == pytest.approx(0.0)  # joint c (0.3, 0.1) − specialists (0.2, 0.2)
    assert diff["a"]["mean"] == pytest.approx(0.0) and diff["b"]["mean"] == pytest.approx(0.0)
    assert s["differences"]["joint − warm start"]["trained"]["mean"] == pytest.approx(0.2)
    loco = s["loco"]
    assert loco["tasks"] == ["b"] and loco["heldout"]["loco_others"]["mean"] == pytest.approx(0.4)
    assert loco["differences"]["loco_others − loco_y"]["mean"] == pytest.approx(-0.3)
    assert loco["differences"]["loco_y − warm start"]["mean"] == pytest.approx(0.3)


def test_ci_sized_specialists_train_only_their_tasks_report_and_resume(tmp_path, capsys):
    config = tmp_path / "s.yaml"
    config.write_text(SMOKE)
    out = tmp_path / "out"
    args = ["experiment", "specialists", "--config", str(config), "--train", "sort_digits,boolean_evaluation"]
    args += ["--holdout-category", "logic", "--seeds", "2", "--out", str(out), "--prune-checkpoints"]
    assert cli(args) == 0
    printed = capsys.readouterr().out
    assert "arm only_sort_digits" in printed and "2 RL steps on sort_digits" in printed
    assert "transfer tasks (no arm trains them): reverse_letters, addition" in printed
    assert "10 RL run(s) of 24 steps in all" in printed  # 2 seeds x (4 + 2 + 2 + 2 + 2)
    for arm, tasks, steps in [
        ("joint", {"sort_digits", "boolean_evaluation"}, 4),
        ("only_boolean_evaluation", {"boolean_evaluation"}, 2),
        ("loco_others", {"sort_digits"}, 2),
    ]:
        run = out / "runs" / arm / "seed1"
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert set(cfg["sampler"]["options"]["weights"]) == tasks and cfg["rl"]["steps"] == steps
        rl = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        sampled = {k.split("/", 1)[1] for r in rl if r.get("stage") == "rl" for k in r if k.startswith("accuracy/")}
        assert sampled and sampled <= tasks
        assert not (run / "checkpoints").exists()
    results = json.loads((out / "results.json").read_text())
    s = results["specialists"]
    assert list(s["means"]) == ["warm start", "joint", "specialists"]
    assert s["differences"]["joint − specialists"]["trained"]["n"] == 2 and s["loco"]["holdout"] == "logic"
    report = (out / "report.md").read_text()
    for text in (
        "## Joint multi-task RL vs single-task specialists",
        "### Leave-one-category-out",
        "MDE",
        "## Verdict",
    ):
        assert text in report
    assert "in-domain (trained tasks):" in report.split("## Verdict")[1]
    assert (out / "specialists.png").stat().st_size > 0
    # every run is scored on the problems pinned when the design started, each answer kept for pairing by problem
    pinned = [json.loads(x) for x in (out / "heldout.jsonl").read_text().splitlines()]
    assert [(r["task"], r["seed"]) for r in pinned] == [(t, k) for t in TASKS for k in range(4)]
    for run in (
        out / "runs" / "sft" / "seed0",
        out / "runs" / "joint" / "seed1",
        out / "runs" / "loco_logic" / "seed0",
    ):
        name = "after_sft" if run.parent.name == "sft" else "after_rl"
        answers = [json.loads(x) for x in (run / "eval" / f"{name}.problems.jsonl").read_text().splitlines()]
        assert [{k: r[k] for k in ("task", "seed", "key")} for r in answers] == pinned
        by_task = json.loads((run / "eval" / f"{name}.json").read_text())
        for t in TASKS:
            assert by_task[t]["accuracy"] == pytest.approx(sum(r["correct"] for r in answers if r["task"] == t) / 4)

    # paired by seed and by problem: the same difference as by seed, with each seed's evaluation noise beside it
    bp = s["by_problem"]["joint − specialists"]["trained"]
    assert bp["seeds"] == 2 and bp["problems"] == 8  # two trained tasks x 4 pinned problems
    assert bp["mean"] == pytest.approx(s["differences"]["joint − specialists"]["trained"]["mean"])
    joint, spec = s["means_per_seed"]["joint"]["trained"], s["means_per_seed"]["specialists"]["trained"]
    assert bp["per_seed"] == pytest.approx([j - k for j, k in zip(joint, spec)])
    assert "Paired by seed and by problem" in report and "Seeds for this design: sizing from 2" in report
    assert "(SE)" in report and "binomial standard error" in report

    assert cli([*args, "--budget", "--target-mde", "5"]) == 0  # a rerun trains nothing; the pilot sizes the design
    printed = capsys.readouterr().out
    assert "RL with" not in printed and "10 finished run(s) skipped" in printed
    assert "sizing from 2 finished seed(s): per-seed SD of joint − specialists (trained)" in printed
    assert cli([*args, "--budget", "--target-mde", "0"]) == 2
    assert "--target-mde is in points" in capsys.readouterr().err
    assert cli(args) == 0  # a rerun trains nothing
    printed = capsys.readouterr().out
    assert "RL with" not in printed and "10 finished run(s) skipped" in printed
    other = [a if a != "logic" else "sequential" for a in args]  # another design into the same directory
    assert cli(other) == 2
    assert "holds runs of another design" in capsys.readouterr().err


def test_a_design_whose_tasks_now_generate_other_problems_is_refused(tmp_path):
    from polyrl.experiments.heldout_set import pin_heldout

    records = [{"task": "a", "seed": 0, "key": "k0"}, {"task": "b", "seed": 0, "key": "k1"}]
    pin_heldout(tmp_path, records)
    pin_heldout(tmp_path, [dict(r) for r in records])  # the same problems: accepted
    with pytest.raises(UserError, match=r"held-out problems differ .*: b; finish the design at the commit"):
        pin_heldout(tmp_path, [records[0], {"task": "b", "seed": 0, "key": "changed"}])
    with pytest.raises(UserError, match="held-out problems differ"):
        pin_heldout(tmp_path, records[:1])
    (tmp_path / "heldout.jsonl").write_text("{not json\n")
    with pytest.raises(UserError, match="is not readable JSON lines"):
        pin_heldout(tmp_path, records)


def test_a_config_with_strategies_or_a_sampler_is_refused(tmp_path, capsys):
    for extra, message in [
        ("strategies:\n  a: {}\n", "a specialists config defines no strategies:"),
        ("sampler: {name: weighted, options: {weights: {addition: 1}}}\n", "remove sampler: from the config"),
    ]:
        config = tmp_path / "s.yaml"
        config.write_text(SMOKE + extra)
        args = ["experiment", "specialists", "--config", str(config), "--train", "sort_digits,addition"]
        assert cli([*args, "--out", str(tmp_path / "o")]) == 2
        assert message in capsys.readouterr().err


def test_the_committed_real_model_designs_plan_as_documented():
    from pathlib import Path

    from polyrl.experiments.curriculum import plan_experiment
    from polyrl.experiments.specialists import plan_specialists

    configs = Path(__file__).parents[2] / "configs" / "claims"
    train = ["sort_digits", "letter_count", "boolean_evaluation", "compose/up"]
    plan, design = plan_specialists(configs / "smollm2_specialists.yaml", train, 3, "/nonexistent/out", "logic")
    assert design.transfer == ["addition", "gcd_lcm", "compose/rev", "caesar"]
    assert {a: s for a, (_, s) in design.arms.items()} == {
        "joint": 40,
        "only_sort_digits": 10,
        "only_letter_count": 10,
        "only_boolean_evaluation": 10,
        "only_compose_up": 10,
        "loco_others": 20,
        "loco_logic": 20,
    }
    assert plan.config(None, 0).sft.steps == 30 and plan.config(None, 0).model.path == "smollm2-135m-instruct"
    plan, design = plan_specialists(configs / "smollm2_power.yaml", train, 2, "/nonexistent/out3", "compose")
    assert {a: s for a, (_, s) in design.arms.items()} == {
        "joint": 88,
        **{f"only_{t.replace('/', '_')}": 22 for t in train},
        "loco_others": 44,
        "loco_compose": 44,
    }
    cfg = plan.config(None, 1)
    assert (cfg.sft.steps, cfg.eval.problems_per_task, cfg.rl.group_size, cfg.rl.lr) == (30, 200, 4, 1e-5)
    gain = plan_experiment(configs / "smollm2_rl_gain.yaml", 5, None, "/nonexistent/out2", hard_difficulty=None)
    cfg = gain.config(gain.strategies[0], 4)  # the job's own recipe, from base: ../smollm2.yaml
    assert (cfg.sft.steps, cfg.rl.steps, cfg.seed, len(cfg.tasks)) == (15, 90, 4, 4)
