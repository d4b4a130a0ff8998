import json

import pytest
from rollout_sampling import sampling

from polyrl.algos import turn_advantages
from polyrl.envs import get_env_task
from polyrl.forward import collate
from polyrl.learner.update_batch import episode_credit
from polyrl.rewards import RewardConfig, score
from polyrl.rollout import Trajectory, rollout
from polyrl.rollout.episodes import rollout_episodes
from polyrl.rollout.reference import reference_episode
from polyrl.tasks import get_task
from polyrl.train.metrics import episode_metrics


def calc_call(expr):
    return "<tool_call>" + json.dumps({"name": "calculator", "arguments": {"expression": expr}}) + "</tool_call>"


def tool_user(prompt_text):
    """Calls the calculator on the question, then copies the tool result into an answer."""
    if "<|tool|>" in prompt_text:
        result = prompt_text.rsplit("<|tool|>", 1)[1].split("<|assistant|>")[0]
        return f"<answer>{result}</answer>"
    question = prompt_text.rsplit("<|user|>", 1)[1].split("<|assistant|>")[0]
    return calc_call(question.rstrip("="))


def test_episodes_generate_in_one_batched_call_per_turn_and_mask_environment_tokens(prompts, scripted, tiny_tokenizer):
    task = get_env_task("env/calculator:multiplication")
    problems = [task.generate(s, {"digits_a": 4, "digits_b": 4}) for s in range(3)]
    backend = scripted(tool_user)
    trajs = rollout_episodes(problems, {task.name: task}, backend, prompts, 2, 80, 200, temperature=1.0, top_p=1.0)
    score(trajs, {task.name: task}, RewardConfig(), 80)
    assert backend.calls == [6, 6]  # two turns, all six episodes in each generate call
    for t in trajs:
        assert t.verdict.correct and t.reward == 1.0 and t.info["turns"] == 2 and t.info["tool_calls"] == 1
        env_text = tiny_tokenizer.decode([i for i, m in zip(t.response_ids, t.policy_mask) if m == 0])
        assert env_text == f"<|tool|>{t.problem.solution}<|assistant|>"
        assert len(t.policy_mask) == len(t.response_ids)
    batch = collate([(t.prompt_ids, t.response_ids) for t in trajs], 0, [t.policy_mask for t in trajs])
    assert batch.num_policy_tokens == sum(sum(t.policy_mask) for t in trajs)


def test_the_episode_token_budget_ends_an_episode_with_a_reason(prompts, scripted):
    task = get_env_task("env/calculator:multiplication")
    problem = task.generate(0, {"digits_a": 4, "digits_b": 4})
    trajs = rollout_episodes(
        [problem], {task.name: task}, scripted(lambda _: "x" * 50), prompts, 2, 60, 100, temperature=1.0, top_p=1.0
    )
    score(trajs, {task.name: task}, RewardConfig(), 60)
    assert [t.verdict.reason for t in trajs] == ["token_budget"] * 2
    assert all(len(t.response_ids) <= 100 and t.reward == 0.0 for t in trajs)


def test_garbage_every_turn_ends_at_the_turn_limit_and_is_counted(prompts, scripted):
    task = get_env_task("env/calculator:multiplication")
    problem = task.generate(0)
    (t,) = rollout_episodes(
        [problem],
        {task.name: task},
        scripted(lambda _: "<tool_call>{oops</tool_call>"),
        prompts,
        1,
        40,
        1000,
        temperature=1.0,
        top_p=1.0,
    )
    assert t.verdict.reason == "max_turns" and t.info["tool_errors"] == 3 and t.info["turns"] == 3
    metrics = episode_metrics([t])
    assert metrics[f"tool_errors/{task.name}"] == 3 and metrics[f"end/max_turns/{task.name}"] == 1.0


def test_mixed_batches_keep_problem_order_and_group_indices(prompts, scripted):
    env = get_env_task("env/retry:addition")
    single = get_task("addition")
    tasks = {env.name: env, "addition": single}
    problems = [single.generate(0), env.generate(1), single.generate(2)]
    trajs = rollout(problems, tasks, scripted(lambda _: "<answer>0</answer>"), prompts, sampling(2, 16))
    assert [(t.task, t.group) for t in trajs] == [("addition", 0)] * 2 + [(env.name, 1)] * 2 + [("addition", 2)] * 2
    assert trajs[2].info["turns"] == 3 and trajs[0].policy_mask == [1] * len(trajs[0].response_ids)


def test_reference_episode_masks_the_tool_result(prompts, tiny_tokenizer):
    task = get_env_task("env/calculator:multiplication")
    problem = task.generate(0)
    _prompt_ids, response_ids, mask = reference_episode(task, problem, prompts, tiny_tokenizer.eos_token_id)
    policy = tiny_tokenizer.decode([i for i, m in zip(response_ids, mask) if m])
    assert (
        policy
        == f"{calc_call(problem.question.rstrip('=')).replace(' ', '')}</s><answer>{problem.solution}</answer></s>"
    )


def _traj(group, turn_rewards, spans, prompt_len=2):
    width = spans[-1][1]
    return Trajectory(
        "t",
        group,
        None,
        [0] * prompt_len,
        [1] * width,
        "",
        True,
        sum(turn_rewards),
        {},
        None,
        turn_spans=spans,
        turn_rewards=turn_rewards,
    )


def test_turn_advantages_credit_each_turn_with_its_reward_to_go():
    # group returns 1 and 0: mean 0.5, std 0.5. Episode a: turn rewards (0, 1) -> both turns have to-go 1 -> +1.
    # Episode b: (0,) -> -1. Episode c alone in its group (zero std, not scaled): turn 1 to-go 0.5 - 0.5 = 0,
    # turn 2 to-go 0 - 0.5 = -0.5. Token t of the loss mask predicts response token t - (prompt_len - 1).
    a = _traj(0, [0.0, 1.0], [(0, 2), (3, 4)])
    b = _traj(0, [0.0], [(0, 3)])
    c = _traj(1, [0.5, 0.0], [(0, 1), (1, 2)])
    adv = turn_advantages([episode_credit(t) for t in (a, b, c)], width=6)
    assert adv[0].tolist() == pytest.approx([0, 1, 1, 0, 1, 0], abs=1e-5)  # response token 2 of a is the environment's
    assert adv[1].tolist() == pytest.approx([0, -1, -1, -1, 0, 0], abs=1e-5)
    assert adv[2].tolist() == pytest.approx([0, 0, -0.5, 0, 0, 0], abs=1e-5)


NATIVE_TEMPLATE = (  # Hermes/Qwen-like: tools declared by the template, a newline after each turn
    "{% if tools %}<|system|>{% for t in tools %}{{ t | tojson }}{% endfor %}\n{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}</s>\n"
    "{% else %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_a_template_with_native_tools_gets_the_schemas_and_closes_turns_its_way(scripted):
    from polyrl.policy.prompts import PromptBuilder, PromptConfig
    from polyrl.policy.tiny import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    tok.chat_template = NATIVE_TEMPLATE
    prompts = PromptBuilder(tok, PromptConfig(field="question"))
    task = get_env_task("env/calculator:multiplication")
    problem = task.generate(0)
    (t,) = rollout_episodes(
        [problem], {task.name: task}, scripted(tool_user), prompts, 1, 80, 200, temperature=1.0, top_p=1.0
    )
    prompt = tok.decode(t.prompt_ids)
    assert '"name": "calculator"' in prompt and "Tools:" not in prompt
    env_text = tok.decode([i for i, m in zip(t.response_ids, t.policy_mask) if m == 0])
    assert env_text == f"\n<|tool|>{problem.solution}\n<|assistant|>"  # the newline after </s> is the template's
    assert t.verdict.correct


def test_natural_prompts_describe_the_tools_in_sentences_and_word_the_game_for_an_llm(tiny_tokenizer, scripted):
    from polyrl.policy.prompts import PromptBuilder, PromptConfig

    calc, grid = get_env_task("env/calculator:multiplication"), get_env_task("env/grid_nav")
    problems = [calc.generate(0), grid.generate(0)]
    tasks = {calc.name: calc, grid.name: grid}

    def prompt_texts(config):
        backend = scripted(lambda _: "<answer>north</answer>")
        episodes = rollout_episodes(
            problems, tasks, backend, PromptBuilder(tiny_tokenizer, config), 1, 16, 200, temperature=1.0, top_p=1.0
        )
        return [tiny_tokenizer.decode(t.prompt_ids) for t in episodes]

    calc_prompt, grid_prompt = prompt_texts(PromptConfig(style="natural"))
    assert "You can call these tools:\n- calculator(expression: string)" in calc_prompt
    assert "Answer with a single integer written in digits: the product itself." in calc_prompt
    assert "You are in a grid with walls and must walk to the goal." in grid_prompt
    calc_prompt, grid_prompt = prompt_texts(PromptConfig(field="question"))  # terse, as the tiny model trains
    assert calc_prompt.startswith('<|system|>Tools: calculator(expression). Call: <tool_call>{"name":...')
    assert "Reach the goal. Move with <answer>north</answer>" in grid_prompt
