"""A generation backend for tests that answers from a script and records what it generated (shared by the
environment and harness tests; importable as ``scripted_backend``: ``tests/`` is on the path)."""

from polyrl.policy.generation import Generation


class ScriptedBackend:
    """Answers each prompt from ``script(prompt_text) -> reply`` (EOS appended, cut at the token budget) and
    records every call's batch size, prompt ids and completion ids, so that tests can check the trajectories
    hold exactly what was generated."""

    def __init__(self, tokenizer, script):
        self.tok, self.script = tokenizer, script
        self.prompts: list[list[int]] = []
        self.completions: list[list[int]] = []
        self.batches: list[int] = []

    @property
    def calls(self) -> list[int]:
        """The batch size of each ``generate`` call."""
        return self.batches

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False):
        self.batches.append(len(prompts))
        out = []
        for p in prompts:
            reply = self.script(self.tok.decode(p))
            ids = self.tok(reply, add_special_tokens=False).input_ids + [self.tok.eos_token_id]
            finished = len(ids) <= max_new_tokens
            ids = ids[:max_new_tokens]
            self.prompts.append(list(p))
            self.completions.append(ids)
            out.append(Generation(list(p), ids, self.tok.decode(ids, skip_special_tokens=True), finished))
        return out

    def sync_weights(self, model, version):
        pass
