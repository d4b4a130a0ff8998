"""``polyrl experiment transfer``: which tasks each arm trains on, its input checks, the transfer statistics
(hand-computed), and the whole command at CI size."""

import json
import math

import pytest
import yaml
from experiment_configs import category_smoke

from polyrl.cli import run as cli
from polyrl.errors import UserError
from polyrl.experiments.transfer import TransferDesign, design_arms, plan_transfer, transfer_summary

CATEGORIES = {
    "sequential": ["sort_digits", "reverse_letters"],
    "logic": ["boolean_evaluation"],
    "arithmetic": ["addition"],
}

SMOKE = category_smoke(rl_steps=2)


def test_arms_train_on_one_other_category_all_others_or_the_held_out_one():
    design = design_arms(CATEGORIES, "logic")
    assert design.arms == {
        "only_sequential": ["sequential"],
        "only_arithmetic": ["arithmetic"],
        "all_others": ["sequential", "arithmetic"],
        "holdout": ["logic"],
    }
    assert design.train_tasks("all_others") == ["sort_digits", "reverse_letters", "addition"]
    # equal weight per training category, split among its tasks; held-out tasks get none
    assert design.weights("all_others") == {"sort_digits": 0.25, "reverse_letters": 0.25, "addition": 0.5}
    assert design.weights("only_sequential") == {"sort_digits": 0.5, "reverse_letters": 0.5}
    assert design.weights("holdout") == {"boolean_evaluation": 1.0}

    chosen = design_arms(CATEGORIES, "sequential", one=["arithmetic"], holdout_arm=False)
    assert chosen.arms == {"only_arithmetic": ["arithmetic"], "all_others": ["logic", "arithmetic"]}


@pytest.mark.parametrize(
    "categories, holdout, one, message",
    [
        (CATEGORIES, "chemistry", None, "unknown category 'chemistry'; known: "),
        (
            CATEGORIES,
            "graph",
            None,
            "no task of category 'graph' in the config; its categories: sequential (sort_digits, reverse_letters); "
            "logic (boolean_evaluation); arithmetic (addition)",
        ),
        ({"logic": ["boolean_evaluation", "sat"]}, "logic", None, "every task in the config is of category 'logic'"),
        ({"logic": ["sat"], "arithmetic": ["addition"]}, "logic", None, "one category besides 'logic' (arithmetic)"),
        (CATEGORIES, "logic", ["logic"], "--one: 'logic' is not one of the other categories in the config"),
        (CATEGORIES, "logic", ["arithmetic", "arithmetic"], "--one names a category twice"),
    ],
)
def test_bad_categories_are_one_line_errors(categories, holdout, one, message):
    with pytest.raises(UserError) as err:
        design_arms(categories, holdout, one)
    assert message in str(err.value)


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    config = tmp_path / "t.yaml"
    config.write_text(SMOKE)
    base = ["experiment", "transfer", "--config", str(config), "--out", str(tmp_path / "o")]
    assert cli([*base, "--holdout", "chemistry"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("polyrl: error: unknown category 'chemistry'") and "\n" not in err
    assert cli([*base, "--holdout", "grid"]) == 2
    assert "no task of category 'grid' in the config" in capsys.readouterr().err
    config.write_text(SMOKE + "strategies:\n  a: {rl: {steps: 1}}\n")
    assert cli([*base, "--holdout", "logic"]) == 2
    assert "defines no strategies:" in capsys.readouterr().err
    config.write_text(SMOKE + "sampler: {name: learning_progress}\n")
    assert cli([*base, "--holdout", "logic"]) == 2
    assert "remove sampler: from the config" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_transfer_statistics_by_hand():
    design = TransferDesign(
        "L",
        {"L": ["l1", "l2"], "A": ["a1"], "B": ["b1"]},
        {"only_A": ["A"], "only_B": ["B"], "all_others": ["A", "B"], "holdout": ["L"]},
    )

    def run(l1, l2, a1, b1):
        return {"per_seed": {"easy": {"l1": l1, "l2": l2, "a1": a1, "b1": b1}}}

    summary = {
        # warm start: held-out mean per seed (l1 + l2) / 2 = 0.3, 0.3, 0.3
        "after_sft_per_seed": {
            "easy": {"l1": [0.2, 0.3, 0.4], "l2": [0.4, 0.3, 0.2], "a1": [0.1] * 3, "b1": [0.5] * 3}
        },
        "strategies": {
            "only_A": run([0.4, 0.4, 0.4], [0.4, 0.4, 0.4], [0.3, 0.2, 0.4], [0.5] * 3),  # held-out 0.4 each seed
            "only_B": run([0.2, 0.3, 0.4], [0.4, 0.3, 0.2], [0.1] * 3, [0.5, 0.6, 0.7]),  # held-out 0.3
            "all_others": run([0.5, 0.6, 0.4], [0.5, 0.6, 0.4], [0.2] * 3, [0.6] * 3),  # held-out 0.5, 0.6, 0.4
            "holdout": run([0.8, 0.8, 0.8], [0.6, 0.6, 0.6], [0.1] * 3, [0.5] * 3),  # held-out 0.7
        },
    }
    t = transfer_summary(summary, design)
    assert t["per_seed"]["warm start"]["L"] == pytest.approx([0.3, 0.3, 0.3])
    held = t["heldout"]["all_others"]
    # mean 0.5, SD 0.1, CI 0.5 ± 4.303 · 0.1 / √3
    assert held["mean"] == pytest.approx(0.5) and held["sd"] == pytest.approx(0.1)
    assert held["high"] - held["mean"] == pytest.approx(4.303 * 0.1 / math.sqrt(3))
    # all_others − only_A: 0.1, 0.2, 0.0 → mean 0.1, SE 0.1/√3, MDE (4.303 + 1.061) · SE
    d = t["differences"]["all_others − only_A"]
    assert d["mean"] == pytest.approx(0.1) and d["se"] == pytest.approx(0.1 / math.sqrt(3))
    assert d["mde"] == pytest.approx(5.364 * 0.1 / math.sqrt(3))
    # mean of the single-category arms per seed: (0.4 + 0.3) / 2 = 0.35 → differences 0.15, 0.25, 0.05
    assert t["differences"]["all_others − mean of only_*"]["mean"] == pytest.approx(0.15)
    assert t["differences"]["holdout − warm start"]["mean"] == pytest.approx(0.4)
    assert t["differences"]["holdout − all_others"]["mean"] == pytest.approx(0.2)
    assert t["differences"]["only_B − warm start"]["sd"] == pytest.approx(0.0)
    # on its own categories: only_A gains 0.2, 0.1, 0.3 on a1; all_others (A + B)/2 = 0.4 vs 0.3 → +0.1
    assert t["trained"]["only_A"]["gain"]["mean"] == pytest.approx(0.2)
    assert t["trained"]["all_others"]["gain"]["mean"] == pytest.approx(0.1)
    assert t["trained"]["holdout"]["accuracy"]["mean"] == pytest.approx(0.7)


def test_ci_sized_transfer_trains_only_each_arms_categories_reports_and_resumes(tmp_path, capsys):
    config = tmp_path / "t.yaml"
    config.write_text(SMOKE)
    out = tmp_path / "out"
    args = ["experiment", "transfer", "--config", str(config), "--holdout", "logic", "--seeds", "2", "--out", str(out)]
    assert cli(args) == 0
    printed = capsys.readouterr().out
    assert (
        "arm all_others               RL on sequential (sort_digits, reverse_letters); arithmetic (addition)"
        in printed
    )
    assert "budget: 2 SFT run(s) × 10 steps + 8 RL run(s) × 2 steps" in printed

    trained = {"only_sequential": {"sort_digits", "reverse_letters"}, "only_arithmetic": {"addition"}}
    trained |= {
        "all_others": trained["only_sequential"] | trained["only_arithmetic"],
        "holdout": {"boolean_evaluation"},
    }
    all_tasks = {"sort_digits", "reverse_letters", "boolean_evaluation", "addition"}
    for arm, tasks in trained.items():
        run = out / "runs" / arm / "seed1"
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        assert cfg["sampler"]["name"] == "weighted" and set(cfg["sampler"]["options"]["weights"]) == tasks
        rl = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        rl = [r for r in rl if r.get("stage") == "rl"]
        sampled = {k.split("/", 1)[1] for r in rl for k in r if k.startswith("accuracy/")}
        assert sampled and sampled <= tasks  # RL drew problems only from the arm's categories
        assert set(json.loads((run / "eval" / "after_rl.json").read_text())) == all_tasks | {"mean"}

    results = json.loads((out / "results.json").read_text())
    t = results["transfer"]
    assert t["holdout"] == "logic" and list(t["heldout"]) == ["warm start", *trained]
    assert t["heldout"]["warm start"]["n"] == 2
    # the held-out category is one task here: its per-seed score is that task's accuracy
    assert (
        t["per_seed"]["all_others"]["logic"]
        == results["strategies"]["all_others"]["per_seed"]["easy"]["boolean_evaluation"]
    )
    report = (out / "report.md").read_text()
    for text in ("## Transfer to the held-out category `logic`", "all_others − only_arithmetic", "MDE", "## Verdict"):
        assert text in report
    assert "on held-out `logic`, `all_others`" in report.split("## Verdict")[1]
    assert (out / "transfer.png").stat().st_size > 0

    assert cli(args) == 0  # a rerun skips every finished run
    printed = capsys.readouterr().out
    assert "RL with" not in printed and "SFT warm start" not in printed and "8 finished run(s) skipped" in printed

    # another held-out category into the same directory would reuse runs of another design
    assert cli([*args[:4], "--holdout", "sequential", *args[6:]]) == 2
    assert "holds runs with held-out category 'logic'" in capsys.readouterr().err


def test_budget_only_plans_and_trains_nothing(tmp_path, capsys):
    config = tmp_path / "t.yaml"
    config.write_text(SMOKE)
    out = tmp_path / "out"
    plan, design = plan_transfer(config, "arithmetic", 3, out, holdout_arm=False)
    assert design.weights("all_others") == {"sort_digits": 0.25, "reverse_letters": 0.25, "boolean_evaluation": 0.5}
    assert [s.name for s in plan.strategies] == ["only_sequential", "only_logic", "all_others"]
    assert plan.seeds == [0, 1, 2] and not plan.share_sft and plan.hard == {}
    args = ["experiment", "transfer", "--config", str(config), "--holdout", "arithmetic", "--one", "logic"]
    assert cli([*args, "--out", str(out), "--budget"]) == 0
    printed = capsys.readouterr().out
    assert "budget: 3 SFT run(s) × 10 steps at" in printed and "9 RL run(s) × 2 steps at" in printed
    assert "only_sequential" not in printed
    assert not (out / "runs").exists()
