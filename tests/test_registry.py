"""The one Registry shape every extension kind uses: registration, duplicates, lookups with suggestions,
lazy loading of the explicit built-in modules, and the existing registration functions as thin names."""

import sys
import textwrap
from pathlib import Path

import pytest

from polyrl.algos import ADVANTAGE_ESTIMATORS, AGGREGATIONS, KL_ESTIMATORS, OBJECTIVES
from polyrl.algos.gradient_surgery import SURGERIES
from polyrl.critic.value_losses import VALUE_LOSSES
from polyrl.curriculum import SAMPLERS, TaskSampler, register_sampler
from polyrl.envs.registry import ENVS, list_envs
from polyrl.errors import UserError
from polyrl.policy.backends import BACKENDS
from polyrl.registry import Registry
from polyrl.tasks.builtin import MODULES
from polyrl.tasks.registry import TASKS


def double(x):
    return 2 * x


def triple(x):
    return 3 * x


def test_register_and_lookup():
    widgets = Registry("widget")
    widgets.register("double")(double)
    assert widgets.lookup("double") is double
    assert widgets.names() == ["double"]
    assert "double" in widgets and len(widgets) == 1


def test_add_is_register_without_a_decorator():
    widgets = Registry("widget")
    assert widgets.add("triple", triple) is triple
    assert dict(widgets) == {"triple": triple}


def test_a_different_object_under_a_taken_name_raises():
    widgets = Registry("widget")
    widgets.add("f", double)
    with pytest.raises(ValueError, match=r"widget 'f' is already registered by .*double"):
        widgets.add("f", triple)
    assert widgets.lookup("f") is double


def test_the_same_object_registered_again_is_fine():
    widgets = Registry("widget")
    widgets.add("f", double)
    widgets.add("f", double)
    assert widgets.names() == ["f"]


def test_a_redefinition_from_the_same_place_is_the_same_entry():
    # a module imported twice (e.g. by path and by name) defines an equal function at the same qualname
    widgets = Registry("widget")
    widgets.add("f", double)
    again = type(double)(double.__code__, double.__globals__, "double")
    widgets.add("f", again)
    assert widgets.lookup("f") is again


def test_two_lambdas_are_different_entries():
    widgets = Registry("widget")
    widgets.add("f", lambda x: x)
    with pytest.raises(ValueError, match="already registered"):
        widgets.add("f", lambda x: -x)


@pytest.mark.parametrize("name", ["", "two words", None])
def test_names_must_be_nonempty_without_spaces(name):
    with pytest.raises(ValueError, match="widget name"):
        Registry("widget").add(name, double)


def test_unknown_name_suggests_the_closest():
    widgets = Registry("widget")
    widgets.add("double", double)
    widgets.add("triple", triple)
    with pytest.raises(UserError, match=r"^unknown widget 'doubel'; did you mean double\?$"):
        widgets.lookup("doubel")


def test_unknown_name_with_nothing_close_lists_every_name():
    widgets = Registry("widget")
    widgets.add("double", double)
    widgets.add("triple", triple)
    with pytest.raises(UserError, match=r"^unknown widget 'zzz'; known: double, triple$"):
        widgets.lookup("zzz")


def test_unhashable_name_is_a_user_error():
    with pytest.raises(UserError, match="unknown widget"):
        Registry("widget").lookup(["double"])


def test_remove_forgets_a_name():
    widgets = Registry("widget")
    widgets.add("f", double)
    del widgets["f"]
    assert widgets.names() == []


def test_builtin_modules_load_on_first_read_only(tmp_path, monkeypatch):
    source = """
        from polyrl.registry import Registry

        GADGETS = Registry("gadget", builtins=("gadget_builtins",))
    """
    (tmp_path / "gadgets.py").write_text(textwrap.dedent(source))
    (tmp_path / "gadget_builtins.py").write_text("from gadgets import GADGETS\n\nGADGETS.add('spring', 1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        from gadgets import GADGETS

        assert "gadget_builtins" not in sys.modules
        assert GADGETS.names() == ["spring"]
        assert "gadget_builtins" in sys.modules
    finally:
        sys.modules.pop("gadgets", None)
        sys.modules.pop("gadget_builtins", None)


# --- every kind uses it ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "registry, group, builtin",
    [
        (TASKS, "polyrl.tasks", "addition"),
        (ENVS, "polyrl.envs", "retry"),
        (SAMPLERS, "polyrl.samplers", "learning_progress"),
        (ADVANTAGE_ESTIMATORS, "polyrl.advantages", "grpo"),
        (OBJECTIVES, "polyrl.objectives", "cispo"),
        (AGGREGATIONS, "polyrl.aggregations", "token_mean"),
        (KL_ESTIMATORS, "polyrl.kl", "k3"),
        (VALUE_LOSSES, "polyrl.value_losses", "hl_gauss"),
        (SURGERIES, "polyrl.gradient_surgery", "pcgrad"),
        (BACKENDS, "polyrl.backends", "vllm"),
    ],
)
def test_every_kind_is_a_registry_with_its_entry_point_group(registry, group, builtin):
    assert isinstance(registry, Registry)
    assert registry.entry_point_group == group
    assert builtin in registry.names()


def test_every_builtin_task_module_is_listed_explicitly():
    package = sys.modules["polyrl.tasks.builtin"].__path__[0]
    on_disk = {f"polyrl.tasks.builtin.{p.stem}" for p in Path(package).glob("*.py") if not p.stem.startswith("_")}
    assert set(MODULES) == on_disk
    # sudoku, countdown, knights_knaves and shortest_path come from the four modules that used to load
    # only through side-effect imports
    assert {"sudoku", "countdown", "knights_knaves", "shortest_path"} <= set(TASKS.names())


def test_adaptive_samplers_load_without_importing_their_module_first():
    assert {"success_temperature", "learning_progress", "success_band", "staged"} <= set(SAMPLERS.names())


def test_register_sampler_rejects_a_second_class_under_a_taken_name():
    with pytest.raises(ValueError, match="sampler 'uniform' is already registered"):

        @register_sampler("uniform")
        class Other(TaskSampler):
            pass


def test_environments_list_their_argument():
    assert "env/retry:<argument>" in list_envs() and "env/wordle" in list_envs()
