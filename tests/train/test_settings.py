"""The update's settings are built once from the config, and every field of them comes from it."""

import dataclasses

import pytest

from polyrl.algos.objectives import GSPOSettings
from polyrl.learner.settings import UpdateSettings
from polyrl.learner.update import objective_settings_for
from polyrl.train.config import RLConfig

# a value unlike the default for every RLConfig field the update reads
CHANGED = dict(
    advantage="rloo",
    task_normalize=True,
    skip_zero_advantage=False,
    objective="gspo",
    objective_settings={"clip_ratio_high": 0.01},
    epochs=3,
    minibatches=2,
    micro_batch_tokens=300,
    temperature=0.7,
    share_prompts=False,
    kl_coef=0.02,
    kl_estimator="k1",
    entropy_coef=0.001,
    loss_aggregation="seq_mean_token_mean",
    max_new_tokens=40,
    max_grad_norm=0.5,
    gradient_surgery="pcgrad",
    clip_ratio_low=0.1,
    clip_ratio_high=0.3,
    mask_truncated=True,
    offpolicy_kl_threshold=0.2,
)


def test_every_update_setting_is_the_config_field_of_its_name():
    rl = RLConfig(**CHANGED)
    settings = UpdateSettings.from_config(rl, tis_cap=3.0)
    copied = {f.name for f in dataclasses.fields(UpdateSettings)} - {"objective_settings", "tis_cap"}
    assert copied - set(CHANGED) == {"advantage_level"}  # "turn" needs grpo: checked at its default
    for name in copied:
        assert getattr(settings, name) == getattr(rl, name), name
        if name in CHANGED:
            assert getattr(settings, name) != RLConfig.model_fields[name].get_default(call_default_factory=True), name
    assert settings.tis_cap == 3.0


def test_the_objective_gets_the_shared_fields_and_its_own_settings():
    objective = UpdateSettings.from_config(RLConfig(**CHANGED)).objective_settings
    assert (objective.clip_ratio_low, objective.clip_ratio_high) == (0.1, 0.3)
    assert (objective.aggregation, objective.max_tokens) == ("seq_mean_token_mean", 40)
    assert objective.mask_truncated and objective.offpolicy_kl_threshold == 0.2
    assert objective.own == GSPOSettings(clip_ratio_low=3e-4, clip_ratio_high=0.01)


@pytest.mark.parametrize("has_behaviour_logprobs, expected", [(True, 2.0), (False, None)])
def test_truncated_importance_sampling_applies_only_to_batches_sampled_by_other_weights(
    has_behaviour_logprobs, expected
):
    settings = UpdateSettings.from_config(RLConfig(), tis_cap=2.0)
    assert objective_settings_for(settings, has_behaviour_logprobs).tis_cap == expected


def test_the_settings_are_frozen():
    settings = UpdateSettings.from_config(RLConfig())
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.epochs = 2
    assert settings.replace(epochs=2).epochs == 2 and settings.epochs == 1


def test_the_worked_example_in_the_architecture_docs_prints_what_it_shows():
    import doctest
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    (example,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "UpdateSettings.from_config" in b]
    test = doctest.DocTestParser().get_doctest(example, {}, "architecture.md", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
