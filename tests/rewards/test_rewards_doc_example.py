"""docs/rewards.md shows what examples/score_demo.py prints: polyrl's and TRL's signature give the same term."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_documented_output_is_what_the_example_prints():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "examples")])}
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "score_demo.py")], env=env, capture_output=True, text=True, check=True
    )
    printed = out.stdout.splitlines()
    doc = (ROOT / "docs" / "rewards.md").read_text()
    block = doc[doc.index("```\nrewards_demo:brevity\n") + 4 :].split("```", 1)[0].splitlines()
    assert [line for line in block if not line.startswith("polyrl: warning")] == printed
    assert out.stderr.strip() in block  # the one warning line of the sleeping function
    polyrl_terms = [line.split("terms")[1].replace("brevity_trl", "brevity") for line in printed[1:4]]
    assert polyrl_terms == [line.split("terms")[1].replace("brevity_trl", "brevity") for line in printed[5:8]]
