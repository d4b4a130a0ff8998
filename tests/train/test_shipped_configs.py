"""Every config the project ships at the top of configs/ passes the checks its command runs before training: a
training config loads and every task it names exists (what ``polyrl train --config`` builds), an experiment design
(with ``strategies:``) plans, each arm's config checked per seed (what ``polyrl experiment`` does first). A user who
runs one does not meet a validation error the project could have caught."""

from pathlib import Path

import pytest
import yaml

from polyrl.experiments.curriculum import plan_experiment
from polyrl.harness.resolve import resolve_task_spec
from polyrl.train.config import load_config

CONFIGS = Path(__file__).parents[2] / "configs"
SHIPPED = sorted(CONFIGS.glob("*.yaml"))
EXPERIMENTS = [p for p in SHIPPED if "strategies" in yaml.safe_load(p.read_text())]
TRAINING = [p for p in SHIPPED if p not in EXPERIMENTS]


def test_both_kinds_are_found():
    assert {"default.yaml", "smollm2.yaml", "smollm2_envs.yaml", "smollm2_envs_rl.yaml"} <= {p.name for p in TRAINING}
    assert {"curriculum.yaml", "compose.yaml"} <= {p.name for p in EXPERIMENTS}


@pytest.mark.parametrize("path", TRAINING, ids=lambda p: p.name)
def test_a_shipped_training_config_loads_and_names_real_tasks(path, monkeypatch):
    monkeypatch.syspath_prepend(str(CONFIGS.parent / "examples"))  # the demos' own modules, as their comments say
    config = load_config(path)
    for spec in config.tasks:
        assert resolve_task_spec(spec, config.env).name, spec.name


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_a_shipped_experiment_design_plans(path, tmp_path):
    plan = plan_experiment(path, 2, None, tmp_path / "out")
    assert plan.strategies and plan.seeds == [0, 1]
