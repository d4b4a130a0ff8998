import sys
from pathlib import Path

import pytest
from scripted_backend import ScriptedBackend

# the agents' modules, importable as a user's are: the examples' (calc_agent, vf_add_taskset) and the tests'
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[2] / "examples")]


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from polyrl.policy.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture
def prompts(tiny_tokenizer):
    from polyrl.policy.prompts import PromptBuilder, PromptConfig

    return PromptBuilder(tiny_tokenizer, PromptConfig(field="question"))


@pytest.fixture
def recording(tiny_tokenizer):
    return lambda script: ScriptedBackend(tiny_tokenizer, script)
