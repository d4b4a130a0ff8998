"""docs/architecture.md is the trace of a real step: its table names every ``src/polyrl`` file one RL step of the
embedded default runs (task implementations aside), nothing it does not run, in the order data first reaches them.

The step is profiled in a process of its own (``tests/step_trace.py``, which prints the list: run it to see what
the table must say after a change to the step).
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
TABLE_HEADING = re.compile(r"^## The (\d+) files of one RL step, in order$", re.M)
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*`([^`]+)`\s*\|", re.M)
MOST_FILES = 30
"""What a reader walks through for one step (issue #41: 39 before the forward had a room of its own)."""


def documented_files() -> tuple[int, list[str]]:
    """The count in the table's heading and the table's files, in their order."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    heading = TABLE_HEADING.search(page)
    assert heading, "docs/architecture.md has no '## The N files of one RL step, in order' section"
    section = page[heading.end() :].split("\n## ", 1)[0]
    rows = ROW.findall(section)
    assert [int(n) for n, _ in rows] == list(range(1, len(rows) + 1)), "the table's rows are numbered 1, 2, …"
    return int(heading.group(1)), [path for _, path in rows]


@pytest.fixture(scope="module")
def traced() -> list[str]:
    """The files two RL steps of the embedded default run, in first-call order (one profile per module)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "step_trace.py")], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def test_the_architecture_page_names_every_file_one_rl_step_runs_in_the_order_data_reaches_them(traced):
    count, documented = documented_files()
    missing = [f for f in traced if f not in documented]
    not_run = [f for f in documented if f not in traced]
    assert (missing, not_run) == ([], []), (
        f"the step runs, the page lacks: {missing}; the page lists, unrun: {not_run}"
    )
    assert documented == traced, "in the order the step first reaches them:\n" + "\n".join(traced)
    assert count == len(traced)


def test_one_rl_step_runs_at_most_thirty_files(traced):
    assert len(traced) <= MOST_FILES


def test_the_page_gives_the_trainer_s_length_as_it_is():
    page = (ROOT / "docs" / "architecture.md").read_text()
    stated = re.search(r"`train/trainer.py` is the orchestration a reader opens first \((\d+) lines", page)
    assert stated, "the page says how long train/trainer.py is"
    assert int(stated.group(1)) == len((ROOT / "src" / "polyrl" / "train" / "trainer.py").read_text().splitlines())
