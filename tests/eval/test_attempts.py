"""Multi-attempt evaluation (``eval.attempts``): a wrong answer gets env/retry's feedback and the policy answers
again; ``attempt<k>`` is the share of problems right within the first k attempts. Checked on a scripted policy
with hand-counted numbers."""

import pytest
from rollout_sampling import sampling

from polyrl.envs.retry import feedback
from polyrl.errors import UserError
from polyrl.eval import evaluate_policy
from polyrl.eval.heldout import attempt_accuracy, attempt_tasks
from polyrl.policy.generation import Generation
from polyrl.policy.prompts import PromptBuilder, PromptConfig
from polyrl.policy.tiny import build_tiny_tokenizer
from polyrl.tasks import get_task, resolve_task

PROBLEMS = 6


class ScriptedPolicy:
    """Answers addition problems by a script keyed on the problem's index and the attempt (the number of
    assistant turns in the prompt), and records every prompt it saw.

    index % 3 == 0: right at once; == 1: a wrong number, then right; == 2: no answer at all, then a wrong
    number, then right. So of 6 problems: 2 right at attempt 1, 4 within 2 attempts, 6 within 3.
    """

    def __init__(self, tokenizer, task, problems):
        self.tok = tokenizer
        self.task = task
        self.by_question = {p.question: i for i, p in enumerate(problems)}
        self.problems = problems
        self.prompts: list[str] = []

    def reply(self, prompt: str) -> str:
        self.prompts.append(prompt)
        index = next(i for q, i in self.by_question.items() if q in prompt)
        attempt = prompt.count("<|assistant|>")
        right = self.task.reference_response(self.problems[index])
        wrong = self.task.answer_format.wrap("-1")
        script = {0: [right], 1: [wrong, right], 2: ["I am not sure.", wrong, right]}[index % 3]
        return script[min(attempt, len(script)) - 1]

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False):
        out = []
        for p in prompts:
            ids = self.tok(self.reply(self.tok.decode(p)), add_special_tokens=False).input_ids + [
                self.tok.eos_token_id
            ]
            out.append(Generation(list(p), ids, self.tok.decode(ids, skip_special_tokens=True), True))
        return out

    def sync_weights(self, model, version):
        pass


@pytest.fixture(scope="module")
def setup():
    tok = build_tiny_tokenizer()
    prompts = PromptBuilder(tok, PromptConfig(field="question"))
    task = get_task("addition")
    problems = [task.generate(i, 0.0, split="eval") for i in range(PROBLEMS)]
    return tok, prompts, task, problems


def test_attempt_accuracy_counts_right_within_k_attempts(setup):
    tok, prompts, task, problems = setup
    policy = ScriptedPolicy(tok, task, problems)
    two = attempt_accuracy(policy, prompts, task, problems, 2, sampling(1, 32, max_episode_tokens=384))
    assert two == {"attempt1": 2 / 6, "attempt2": 4 / 6}
    # 6 first attempts + 4 second ones (the problems wrong at attempt 1)
    assert len(policy.prompts) == 10
    three = attempt_accuracy(
        ScriptedPolicy(tok, task, problems), prompts, task, problems, 3, sampling(1, 32, max_episode_tokens=384)
    )
    assert three == {"attempt1": 2 / 6, "attempt2": 4 / 6, "attempt3": 6 / 6}


def test_the_second_attempt_sees_env_retry_feedback(setup):
    tok, prompts, task, problems = setup
    policy = ScriptedPolicy(tok, task, problems)
    attempt_accuracy(policy, prompts, task, problems, 2, sampling(1, 32, max_episode_tokens=384))
    second = [p for p in policy.prompts if p.count("<|assistant|>") == 2]
    wrong = task.verify(problems[1], task.answer_format.wrap("-1"))
    missing = task.verify(problems[2], "I am not sure.")
    # the exact messages of the training environment (envs/retry.py: feedback), after the first answer
    assert any(problems[1].question in p and feedback(task, wrong) in p for p in second)
    assert feedback(task, wrong) == "-1 is wrong. Try again."
    assert any(problems[2].question in p and feedback(task, missing) in p for p in second)
    assert feedback(task, missing).startswith("No answer found (")


def test_a_token_budget_cut_counts_as_wrong_from_there_on(setup):
    tok, prompts, task, problems = setup
    # room for the first answer only: the feedback does not fit, so nobody gets a second attempt
    two = attempt_accuracy(
        ScriptedPolicy(tok, task, problems), prompts, task, problems, 2, sampling(1, 32, max_episode_tokens=20)
    )
    assert two == {"attempt1": 2 / 6, "attempt2": 2 / 6}


GREEDY = dict(pass_k=1, temperature=1.0, seed=0, max_episode_tokens=384, env_concurrency=16)
"""evaluate_policy's settings besides ``attempts``: greedy answers only, episodes of up to 384 tokens."""


def test_evaluate_policy_adds_attempts_and_scores_env_retry_on_the_plain_task(setup):
    tok, prompts, task, problems = setup
    policy = ScriptedPolicy(tok, task, problems)
    retry = resolve_task("env/retry:addition")
    results = evaluate_policy(
        policy, prompts, {"env/retry:addition": (retry, 0.0)}, PROBLEMS, 32, **GREEDY, attempts=2
    )
    assert set(results) == {"addition", "mean"}  # the plain task's problems, under its name
    row = results["addition"]
    assert row["accuracy"] == row["attempt1"] == 2 / 6  # the same greedy first answer
    assert row["attempt2"] == 4 / 6
    assert results["mean"]["attempt2"] == 4 / 6
    # one attempt: no attempt metrics, the environment played as before (its own problems and attempts)
    single = evaluate_policy(
        ScriptedPolicy(tok, task, problems), prompts, {"addition": (task, 0.0)}, PROBLEMS, 32, **GREEDY, attempts=1
    )
    assert "attempt1" not in single["addition"] and single["addition"]["accuracy"] == 2 / 6


def test_attempt_tasks_unwraps_env_retry_and_rejects_other_environments_and_doubles():
    plain = get_task("addition")
    sort = get_task("sort_digits")
    mapped = attempt_tasks({"env/retry:addition": (resolve_task("env/retry:addition"), 0.3), "sort_digits": (sort, 0)})
    assert list(mapped) == ["addition", "sort_digits"] and mapped["sort_digits"] == (sort, 0)
    assert type(mapped["addition"][0]) is type(plain) and mapped["addition"][1] == 0.3
    with pytest.raises(UserError, match="is an environment"):
        attempt_tasks({"env/calculator:addition": (resolve_task("env/calculator:addition"), 0.0)})
    with pytest.raises(UserError, match="twice"):
        attempt_tasks({"addition": (plain, 0.0), "env/retry:addition": (resolve_task("env/retry:addition"), 0.0)})


@pytest.mark.parametrize(
    ("tasks", "attempts", "message"),
    [
        (["addition"], 0, "eval.attempts"),
        (["env/calculator:addition"], 2, "is an environment"),
        (["addition", "env/retry:addition"], 2, "is in the mix too"),
    ],
)
def test_config_rejects_attempts_it_cannot_evaluate(tasks, attempts, message):
    from polyrl.train.config import load_config

    with pytest.raises(UserError, match=message):
        load_config(None, base={"tasks": [{"name": n} for n in tasks], "eval": {"attempts": attempts}})


def test_config_default_is_one_attempt_and_env_retry_loads_with_two():
    from polyrl.train.config import load_config

    assert load_config(None, base={"tasks": [{"name": "addition"}]}).eval.attempts == 1
    cfg = load_config(None, base={"tasks": [{"name": "env/retry:addition"}], "eval": {"attempts": 2}})
    assert cfg.eval.attempts == 2
