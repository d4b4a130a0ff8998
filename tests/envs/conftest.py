import pytest

from polyrl.policy.generation import Generation


class ScriptedBackend:
    """A generation backend that answers each episode from a script: ``script(prompt_text) -> reply``."""

    def __init__(self, tokenizer, script):
        self.tok = tokenizer
        self.script = script
        self.calls = []

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False):
        self.calls.append(len(prompts))
        out = []
        for p in prompts:
            text = self.script(self.tok.decode(p))
            ids = self.tok(text, add_special_tokens=False).input_ids + [self.tok.eos_token_id]
            finished = len(ids) <= max_new_tokens
            ids = ids[:max_new_tokens]
            out.append(Generation(list(p), ids, self.tok.decode(ids, skip_special_tokens=True), finished))
        return out

    def sync_weights(self, model, version):
        pass


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
