"""Layering: the library's lower layers never import the training loop or the experiments above them."""

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "polyrl"
UPPER = ("polyrl.train", "polyrl.experiments", "polyrl.cli")
ALLOWED = ("train", "experiments", "cli", "__main__.py")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_nothing_below_train_imports_train_experiments_or_the_cli():
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] in ALLOWED:
            continue
        bad = sorted(n for n in _imports(path) if n.startswith(UPPER))
        if bad:
            offenders.append(f"{rel}: {', '.join(bad)}")
    assert not offenders, offenders
