"""`polyrl experiment compose` end to end at CI size, its report, and the shipped held-out suite."""

import json

import pytest
import yaml
from experiment_configs import ci_config, config_file

from polyrl.cli import run as cli
from polyrl.errors import UserError
from polyrl.experiments.compose import HeldOutSuite, group_means, plan_compose
from polyrl.tasks.builtin.compositions import chain_name, held_out_chains

TINY = ci_config(
    [{"name": "compose/rev", "difficulty": "easy"}, {"name": "compose/up", "difficulty": "easy"}],
    sft_steps=10,
    rl={"steps": 2, "max_new_tokens": 8},
    eval={"problems_per_task": 4},
    strategies={
        "primitives": {},
        "primitives+depth2": {
            "tasks": [
                {"name": "compose/rev", "difficulty": "easy"},
                {"name": "compose/up", "difficulty": "easy"},
                {"name": "compose/mix", "difficulty": {"depth": 2, "length": 4, "alphabet": 6}},
            ],
            "sampler": {
                "name": "weighted",
                "options": {"weights": {"compose/rev": 1, "compose/up": 1, "compose/mix": 2}},
            },
        },
    },
)


@pytest.fixture
def tiny_config(tmp_path):
    return config_file(tmp_path / "compose.yaml", TINY)


def test_ci_sized_experiment_evaluates_every_arm_on_the_held_out_chains(tiny_config, tmp_path):
    out = tmp_path / "out"
    argv = ["experiment", "compose", "--config", str(tiny_config), "--seeds", "2", "--share-sft", "--out", str(out)]
    assert cli([*argv, "--problems", "2", "--depth3", "2"]) == 0
    assert [p.name for p in (out / "runs" / "sft").iterdir()] == ["seed0"]  # one warm start for both seeds
    assert (out / "runs" / "primitives" / "seed1" / "eval" / "heldout.json").exists()
    results = json.loads((out / "results.json").read_text())
    assert set(results["arms"]) == {"sft", "primitives", "primitives+depth2"}
    assert results["groups"]["heldout_depth2"] == [chain_name(c) for c in held_out_chains(2)]
    assert len(results["groups"]["heldout_depth3"]) == 2
    evals = json.loads((out / "runs" / "primitives+depth2" / "seed0" / "eval" / "heldout.json").read_text())
    assert set(results["groups"]["heldout_depth3"]) <= set(evals)
    report = (out / "report.md").read_text()
    assert "| primitives+depth2 |" in report and "heldout_depth3" in report


def test_an_experiment_with_one_arm_is_a_user_error(tiny_config, tmp_path):
    with pytest.raises(UserError, match="at least two arms"):
        plan_compose(tiny_config, 1, ["primitives"], tmp_path / "out")


def test_group_means_weigh_every_chain_equally():
    evals = {"a": {"accuracy": 1.0}, "b": {"accuracy": 0.0}, "c": {"accuracy": 0.5}}
    assert group_means(evals, {"x": ["a", "b"], "y": ["c"], "empty": []}, "accuracy") == {"x": 0.5, "y": 0.5}


def test_the_default_suite_holds_out_all_depth3_chains_unless_limited():
    assert len(HeldOutSuite().groups()["heldout_depth3"]) == len(held_out_chains(3))
    assert len(HeldOutSuite(depth3=3).groups()["heldout_depth3"]) == 3


def test_the_shipped_held_out_suite_lists_exactly_the_held_out_chains():
    suite = yaml.safe_load(open("configs/suites/compose_heldout.yaml"))
    names = [t["name"] for t in suite["tasks"]]
    assert names == [chain_name(c) for d in (2, 3) for c in held_out_chains(d)]
