import sys
from pathlib import Path

# the agents' modules, importable as a user's are: the examples' (calc_agent, vf_add_taskset) and the tests'
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[2] / "examples")]
