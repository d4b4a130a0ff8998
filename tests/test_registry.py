"""The one Registry shape every extension kind uses: registration, duplicates, lookups with suggestions,
lazy loading of the explicit built-in modules, and the existing registration functions as thin names."""

import ast
import functools
import importlib
import sys
import textwrap
import threading
import time
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from polyrl.algos import ADVANTAGE_ESTIMATORS, AGGREGATIONS, KL_ESTIMATORS, OBJECTIVES
from polyrl.algos.gradient_surgery import SURGERIES
from polyrl.critic.value_losses import VALUE_LOSSES
from polyrl.curriculum import SAMPLERS, TaskSampler, register_sampler
from polyrl.envs.env_registry import ENVS, list_envs
from polyrl.envs.tool_formats import TOOL_FORMATS
from polyrl.errors import UserError
from polyrl.policy.backends import BACKENDS
from polyrl.registry import Registry
from polyrl.rewards.terms import REWARD_SOURCES
from polyrl.rollout.dispatch import ROLLOUT_KINDS
from polyrl.rollout.selfplay import LEARNABILITY
from polyrl.tasks.builtin import MODULES
from polyrl.tasks.prefixes import TASK_PREFIXES
from polyrl.tasks.task_registry import TASKS
from polyrl.tasks.verifiers import DATASET_VERIFIERS
from polyrl.trackers import TRACKERS
from polyrl.train.config import TrainConfig

SRC = Path(__file__).parents[1] / "src" / "polyrl"


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


def test_metadata_goes_to_the_kinds_entry_and_the_object_comes_back_unchanged():
    widgets = Registry("widget", entry=lambda name, obj, size=1: (obj, size))
    assert widgets.register("double", size=3)(double) is double
    assert widgets.lookup("double") == (double, 3)


def test_a_kind_without_an_entry_takes_no_metadata():
    with pytest.raises(TypeError, match="widget is registered by name only"):
        Registry("widget").register("double", size=3)(double)


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


def test_a_lookup_on_another_thread_waits_for_the_built_ins_another_thread_is_loading(tmp_path, monkeypatch):
    """Rollout threads (a Ray actor's) looked up a kind while another thread was still importing the built-ins:
    ``unknown rollout kind 'episode'; known: single_turn``."""
    registry = "from polyrl.registry import Registry\n\nSPRINGS = Registry('spring', builtins=('slow_springs',))\n"
    (tmp_path / "springs.py").write_text(registry)
    (tmp_path / "slow_springs.py").write_text(
        "import time\n\nfrom springs import SPRINGS\n\ntime.sleep(0.3)\nSPRINGS.add('coil', 1)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        from springs import SPRINGS

        found = []
        first = threading.Thread(target=lambda: found.append(SPRINGS.lookup("coil")))
        first.start()
        time.sleep(0.1)  # the first thread is inside the slow import
        found.append(SPRINGS.lookup("coil"))
        first.join()
        assert found == [1, 1]
    finally:
        sys.modules.pop("springs", None)
        sys.modules.pop("slow_springs", None)


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
        (TASK_PREFIXES, "polyrl.task_prefixes", "env/"),
        (REWARD_SOURCES, "polyrl.rewards", "majority_vote"),
        (DATASET_VERIFIERS, "polyrl.verifiers", "numeric"),
        (TRACKERS, "polyrl.trackers", "tensorboard"),
        (TOOL_FORMATS, "polyrl.tool_formats", "hermes"),
        (LEARNABILITY, "polyrl.learnability", "variance"),
        (ROLLOUT_KINDS, "polyrl.rollout_kinds", "episode"),
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


def test_register_task_names_the_class_and_a_bare_decorator_uses_the_class_s_own_name():
    from polyrl.tasks import Task, register_task

    @register_task("named_by_registration")
    class Named(Task):
        category = "text"

    class SelfNamed(Task):
        name = "named_by_itself"
        category = "text"

    try:
        assert Named.name == "named_by_registration" and TASKS["named_by_registration"] is Named
        assert register_task(SelfNamed) is SelfNamed and TASKS["named_by_itself"] is SelfNamed
        with pytest.raises(ValueError, match="SelfNamed is named 'named_by_itself'"):
            register_task("another_name")(SelfNamed)
    finally:
        TASKS.remove("named_by_registration")
        TASKS.remove("named_by_itself")


def test_environments_list_their_argument():
    assert "env/retry:<argument>" in list_envs() and "env/wordle" in list_envs()


# --- one shape for every kind: a new kind that bypasses it fails here ---------------------------------------


@functools.cache
def _modules() -> dict[str, ast.Module]:
    """Every module of src/polyrl parsed once (read, never changed, by the tests below)."""
    return {
        ".".join(p.relative_to(SRC.parent).with_suffix("").parts): ast.parse(p.read_text()) for p in SRC.rglob("*.py")
    }


def _registry_calls() -> list[tuple[str, ast.Call]]:
    return [
        (module, node)
        for module, tree in _modules().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Registry"
    ]


def _registries() -> dict[str, Registry]:
    """Every module-level Registry of the library, by ``module.NAME``."""
    found = {}
    for module, tree in _modules().items():
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            value = getattr(node, "value", None)
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Registry":
                found[f"{module}.{target.id}"] = getattr(importlib.import_module(module), target.id)
    return found


def test_every_registry_in_the_library_has_a_plugin_group_of_its_own():
    groups = []
    for module, call in _registry_calls():
        group = (
            call.args[1]
            if len(call.args) > 1
            else next((k.value for k in call.keywords if k.arg == "entry_point_group"), None)
        )
        assert isinstance(group, ast.Constant) and str(group.value).startswith("polyrl."), f"{module}: {group}"
        groups.append(group.value)
    assert len(groups) == len(set(groups)) >= 16


def test_every_register_function_takes_the_name_then_keyword_metadata_and_is_its_registry_s_register():
    functions = [
        (module, node)
        for module, tree in _modules().items()
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("register_")
    ]
    assert len(functions) >= 17
    for module, fn in functions:
        where = f"{module}.{fn.name}"
        assert [a.arg for a in fn.args.posonlyargs + fn.args.args] == ["name"], where
        assert not fn.args.defaults and fn.args.vararg is None and fn.args.kwarg is None, where
        last = fn.body[-1]
        assert isinstance(last, ast.Return) and isinstance(last.value, ast.Call), where
        call = last.value.func
        assert isinstance(call, ast.Attribute) and call.attr == "register", where
        assert isinstance(last.value.args[0], ast.Name) and last.value.args[0].id == "name", where


def test_no_module_keeps_a_hand_made_table_of_its_functions_or_classes():
    """A dict literal mapping names to functions or classes of its own module is a registry without the
    registry's duplicate check, plugins and one-line errors (as LEARNABILITY and the trackers' table were)."""
    tables = []
    for module, tree in _modules().items():
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        for node in tree.body:
            value = getattr(node, "value", None)
            if isinstance(value, ast.Dict) and len(value.values) >= 2:
                if all(isinstance(v, ast.Name) and v.id in defined for v in value.values):
                    tables.append(f"{module}:{node.lineno}")
    assert not tables, tables


def _choices(model: type[BaseModel], prefix: str = ""):
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _choices(annotation, f"{prefix}{name}.")
        for arg in (annotation, *typing.get_args(annotation)):
            if typing.get_origin(arg) is typing.Literal:
                yield f"{prefix}{name}", set(typing.get_args(arg))


def test_no_config_field_copies_a_registry_s_names_into_a_literal():
    """A choice among registered names is validated by the registry (plugins included), never a Literal copy
    (one shared word such as ``none`` is a coincidence; two are a copy)."""
    registries = _registries()
    assert len(registries) >= 16
    copies = [
        (field, where)
        for field, values in _choices(TrainConfig)
        for where, registry in registries.items()
        if len(values & set(registry.names())) >= 2
    ]
    assert not copies, copies
