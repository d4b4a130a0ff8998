"""Layering: the library's lower layers never import the training loop or the experiments above them, and the
forward (what turns tokens into log-probs) sits below everything that scores tokens with it.

Every import counts, those inside functions and under ``if TYPE_CHECKING:`` too: a deferred import is still an
arrow a reader follows.
"""

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "polyrl"
UPPER = ("polyrl.train", "polyrl.experiments", "polyrl.cli")
ALLOWED = ("train", "experiments", "cli", "__main__.py")
FORWARD_MAY_IMPORT = ("polyrl.forward", "polyrl.errors", "polyrl.device")
"""The forward's own modules and the two the whole library stands on: nothing of the policy, the learner or the
algorithms above it."""


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _offenders(package: str, bad) -> list[str]:
    """``file: imports`` for every module of ``package`` (a folder of src/polyrl) with an import ``bad`` names."""
    offenders = []
    for path in sorted((SRC / package).rglob("*.py")):
        names = sorted(n for n in _imports(path) if bad(n))
        if names:
            offenders.append(f"{path.relative_to(SRC)}: {', '.join(names)}")
    return offenders


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


def test_the_forward_imports_nothing_of_polyrl_above_it():
    above = lambda name: name.startswith("polyrl") and not name.startswith(FORWARD_MAY_IMPORT)
    assert _offenders("forward", above) == []


def test_nothing_imports_the_learner_to_score_tokens():
    # generation, the harness and the Ray workers score tokens with polyrl.forward; the learner is the update's
    scorers = ("policy", "rollout", "distributed", "eval", "serve")
    offenders = [o for package in scorers for o in _offenders(package, lambda n: n.startswith("polyrl.learner"))]
    assert offenders == []


def test_the_learner_imports_nothing_of_the_multi_process_code():
    # one Ranks protocol (learner/ranks.py): FSDP's implementation lives in distributed/ and is handed in
    assert _offenders("learner", lambda n: n.startswith("polyrl.distributed")) == []
