"""A run's parts have one owner each, read there: ``trainer.parts`` (``RunParts``), the mix in ``parts.mix``
(``TaskMix``), the counters in ``trainer.state`` (``RunState``). Issue #41: the Trainer forwarded 12 of them as
properties and ``RunParts`` 5 methods of the mix, so a reader met each part under two names."""

import dataclasses

from polyrl.train.build import RunParts, TaskMix
from polyrl.train.state import RunState
from polyrl.train.trainer import Trainer

HELD = {"config", "parts", "placement", "state"}
"""What the Trainer holds itself (its ``config`` is the run's, as saved with a resume's overrides)."""


def _public(obj) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_the_trainer_forwards_none_of_the_run_s_parts_or_its_state(tiny_train_config):
    trainer = Trainer(tiny_train_config())
    try:
        owned = _fields(RunParts) | _fields(TaskMix) | _public(TaskMix) | _public(RunState) | _public(trainer.state)
        assert (_public(trainer) - HELD) & (owned | {"ranks"}) == set()
    finally:
        trainer._close()


def test_the_run_s_parts_forward_nothing_of_the_task_mix():
    assert _public(RunParts) & (_fields(TaskMix) | _public(TaskMix)) == set()
