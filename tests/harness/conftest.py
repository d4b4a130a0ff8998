import sys
from pathlib import Path

import pytest

from polyrl.policy.generation import Generation

# the agents' modules, importable as a user's are: the examples' (calc_agent, vf_add_taskset) and the tests'
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[2] / "examples")]


class RecordingBackend:
    """Answers each prompt from a script (``script(prompt_text) -> reply``) and records every call's prompt ids
    and completion ids, so that tests can check the trajectories hold exactly what was generated."""

    def __init__(self, tokenizer, script):
        self.tok, self.script = tokenizer, script
        self.prompts: list[list[int]] = []
        self.completions: list[list[int]] = []
        self.batches: list[int] = []

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False):
        self.batches.append(len(prompts))
        out = []
        for p in prompts:
            ids = self.tok(self.script(self.tok.decode(p)), add_special_tokens=False).input_ids + [
                self.tok.eos_token_id
            ]
            finished = len(ids) <= max_new_tokens
            ids = ids[:max_new_tokens]
            self.prompts.append(list(p))
            self.completions.append(ids)
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
def recording(tiny_tokenizer):
    return lambda script: RecordingBackend(tiny_tokenizer, script)
