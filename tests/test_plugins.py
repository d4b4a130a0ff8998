"""Third-party tasks register through the `polyrl.tasks` entry-point group, and a broken one harms nobody.

An installed distribution is simulated by a `<name>.dist-info/` (METADATA + entry_points.txt) and the
plugin module in a temporary directory put on sys.path: exactly what `pip install` leaves behind.
"""

import importlib
import sys
import textwrap

import pytest

from polyrl.errors import UserError
from polyrl.tasks import get_task, list_tasks, registry

PLUGIN_MODULE = """
from polyrl.tasks import Example, Param, Task


class Parity(Task):
    name = "plugin_parity"
    category = "plugin_demo"
    description = "Is a number even or odd?"
    params = (Param("digits", 1, 6, "digits of the number"),)

    def make(self, rng, params):
        n = rng.randrange(10 ** params["digits"])
        word = "even" if n % 2 == 0 else "odd"
        return Example(f"Is {n} even or odd?", word, word)

    def check(self, answer, problem):
        return float(answer.strip().lower() == problem.answer)
"""


def _install(tmp_path, monkeypatch, dist, module, source, entry_points):
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    info = tmp_path / f"{dist}-0.1.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "\n".join(f"{name} = {target}" for name, target in entry_points.items())
    info.joinpath("entry_points.txt").write_text(f"[polyrl.tasks]\n{lines}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    # Built-ins register on import, which happens once per process: load them into the real registry
    # first, then load again into a copy, so the plugin does not outlive the test.
    registry.builtin_and_plugin_tasks()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_LOADED", False)
    monkeypatch.delitem(sys.modules, module, raising=False)


def test_installed_plugin_task_is_found_by_name(tmp_path, monkeypatch):
    _install(
        tmp_path, monkeypatch, "polyrl_parity", "polyrl_parity", PLUGIN_MODULE, {"parity": "polyrl_parity:Parity"}
    )
    task = get_task("plugin_parity")
    problem = task.generate(3, "hard")
    assert task.verify(problem, task.reference_response(problem)).correct
    assert [c.name for c in list_tasks("plugin_demo")] == ["plugin_parity"]
    assert "addition" in {c.name for c in list_tasks()}


def test_broken_plugin_warns_and_builtins_still_work(tmp_path, monkeypatch, capsys):
    _install(
        tmp_path,
        monkeypatch,
        "polyrl_broken",
        "polyrl_broken",
        "raise RuntimeError('boom')\n",
        {"broken": "polyrl_broken:Nothing"},
    )
    task = get_task("addition")
    assert task.verify(task.generate(0), task.reference_response(task.generate(0))).correct
    err = capsys.readouterr().err
    assert "warning: task plugin 'broken'" in err and "boom" in err
    with pytest.raises(UserError):
        get_task("broken")


def test_plugin_missing_its_class_warns(tmp_path, monkeypatch, capsys):
    _install(tmp_path, monkeypatch, "polyrl_typo", "polyrl_typo", PLUGIN_MODULE, {"typo": "polyrl_typo:Parityy"})
    assert get_task("addition").name == "addition"
    assert "warning: task plugin 'typo'" in capsys.readouterr().err
