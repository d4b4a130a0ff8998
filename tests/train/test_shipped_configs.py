"""Every training config the project ships loads as one (an experiment design, with ``strategies:``, is checked by
tests/experiments), and every task it names exists: a user who runs ``polyrl train --config configs/X.yaml`` does
not meet a validation error the project could have caught."""

from pathlib import Path

import pytest
import yaml

from polyrl.harness.resolve import resolve_task_spec
from polyrl.train.config import load_config

CONFIGS = Path(__file__).parents[2] / "configs"
TRAINING = [p for p in sorted(CONFIGS.glob("*.yaml")) if "strategies" not in yaml.safe_load(p.read_text())]


def test_the_training_configs_are_found():
    assert {"default.yaml", "smollm2.yaml", "smollm2_envs.yaml", "smollm2_envs_rl.yaml"} <= {p.name for p in TRAINING}


@pytest.mark.parametrize("path", TRAINING, ids=lambda p: p.name)
def test_a_shipped_training_config_loads_and_names_real_tasks(path, monkeypatch):
    monkeypatch.syspath_prepend(str(CONFIGS.parent / "examples"))  # the demos' own modules, as their comments say
    config = load_config(path)
    for spec in config.tasks:
        assert resolve_task_spec(spec, config.env).name, spec.name
