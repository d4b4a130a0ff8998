"""No import circles in the library (the ones rewards/ and tasks/ had by name), and no arrow from tasks/ up to envs/.

Every import counts: those inside functions (a deferred import is still an arrow a reader follows) and those
under ``if TYPE_CHECKING:`` (a reader follows the types too).
"""

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src"


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    out: set[str] = set()
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - child.level + 1] + [base]).strip(
                        "."
                    )
                submodules = {f"{base}.{a.name}" for a in child.names} & modules
                out.update(submodules)  # ``from package import module`` is an arrow to the module
                if len(submodules) < len(child.names):
                    out.add(base)
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in out if m in modules}


def _graph() -> dict[str, set[str]]:
    paths = {_module(p): p for p in (SRC / "polyrl").rglob("*.py")}
    modules = set(paths)
    return {m: _imports(p, modules) - {m} for m, p in paths.items()}


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


def _in_a_circle(graph, a: str, b: str) -> bool:
    return _reaches(graph, a, b) and _reaches(graph, b, a)


def test_the_reward_and_task_modules_import_in_one_direction():
    graph = _graph()
    pairs = [
        ("polyrl.rewards.reward_config", "polyrl.rewards.stage"),
        ("polyrl.tasks.base", "polyrl.tasks.isolation"),
        ("polyrl.tasks.isolation", "polyrl.tasks.verifier_worker"),
        ("polyrl.tasks.base", "polyrl.tasks.verifier_worker"),
        ("polyrl.tasks.task_registry", "polyrl.tasks.builtin.compositions"),
    ]
    circles = [pair for pair in pairs if _in_a_circle(graph, *pair)]
    assert not circles, circles


def test_no_module_of_the_library_sits_in_a_circle():
    graph = _graph()
    circular = sorted(m for m in graph if any(_in_a_circle(graph, m, n) for n in graph[m]))
    assert not circular, circular


def test_tasks_never_import_envs():
    graph = _graph()
    upward = sorted(f"{m} -> {n}" for m in graph if m.startswith("polyrl.tasks") for n in graph[m] if "envs" in n)
    assert not upward, upward
