"""Every config the project ships at the top of configs/ passes the checks its command runs before training: a
training config loads and every task it names exists (what ``polyrl train --config`` builds), an experiment design
(with ``strategies:``) plans, each arm's config checked per seed (what ``polyrl experiment`` does first). A user who
runs one does not meet a validation error the project could have caught."""

from pathlib import Path

import pytest
import yaml
from system_packages import names_python_tool, needs_bwrap

from polyrl.experiments.curriculum import plan_experiment
from polyrl.tasks import resolve_task
from polyrl.train.config import load_config

CONFIGS = Path(__file__).parents[2] / "configs"
SHIPPED = sorted(CONFIGS.glob("*.yaml"))
EXPERIMENTS = [p for p in SHIPPED if "strategies" in yaml.safe_load(p.read_text())]
TRAINING = [p for p in SHIPPED if p not in EXPERIMENTS]


def _training_param(path: Path):
    """A config naming an ``env/python`` task needs bubblewrap to resolve (the sandbox is checked first)."""
    names = [t["name"] if isinstance(t, dict) else t for t in yaml.safe_load(path.read_text()).get("tasks", [])]
    return pytest.param(path, marks=needs_bwrap) if names_python_tool(names) else path


def test_both_kinds_are_found():
    assert {"default.yaml", "smollm2.yaml", "smollm2_envs.yaml", "smollm2_envs_rl.yaml"} <= {p.name for p in TRAINING}
    assert {"curriculum.yaml", "compose.yaml"} <= {p.name for p in EXPERIMENTS}


@pytest.mark.parametrize("path", [_training_param(p) for p in TRAINING], ids=lambda p: p.name)
def test_a_shipped_training_config_loads_and_names_real_tasks(path, monkeypatch):
    monkeypatch.syspath_prepend(str(CONFIGS.parent / "examples"))  # the demos' own modules, as their comments say
    config = load_config(path)
    for spec in config.tasks:
        task = resolve_task(spec.name, env=config.env, harness=spec.harness, dataset=spec.dataset)
        assert task.name, spec.name


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_a_shipped_experiment_design_plans(path, tmp_path):
    plan = plan_experiment(path, 2, None, tmp_path / "out")
    assert plan.strategies and plan.seeds == [0, 1]
