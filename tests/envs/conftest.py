import pytest
from scripted_backend import ScriptedBackend


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from polyrl.policy.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture
def prompts(tiny_tokenizer):
    from polyrl.policy.prompts import PromptBuilder, PromptConfig

    return PromptBuilder(tiny_tokenizer, PromptConfig(field="question"))


@pytest.fixture
def scripted(tiny_tokenizer):
    return lambda script: ScriptedBackend(tiny_tokenizer, script)
