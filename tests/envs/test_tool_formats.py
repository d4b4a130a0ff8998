"""Tool-call formats against the real chat templates of Qwen2.5, Qwen3, Llama 3.1/3.2 and Mistral v0.3."""

import json

import pytest
from family_tokenizers import family_tokenizer

from polyrl.envs import EnvConfig, get_env_task
from polyrl.envs.tool_formats import (
    HERMES,
    LLAMA3_JSON,
    MISTRAL,
    QWEN3,
    TOOL_FORMATS,
    detect_tool_format,
    parse_tool_calls,
    resolve_tool_format,
)
from polyrl.envs.tool_use import CALCULATOR
from polyrl.errors import UserError
from polyrl.policy.prompts import PromptBuilder, PromptConfig
from polyrl.rollout.chat import ChatCodec
from polyrl.rollout.episodes import rollout_episodes
from polyrl.rollout.reference import reference_episode

FAMILY_FORMAT = {
    "qwen2_5": "hermes",
    "qwen3": "qwen3",
    "llama3_1": "llama3_json",
    "llama3_2": "llama3_json",
    "mistral": "mistral",
}
CALL = {
    "id": "abcdefghi",
    "type": "function",
    "function": {"name": "calculator", "arguments": {"expression": "12*34"}},
}


@pytest.fixture(scope="module", params=sorted(FAMILY_FORMAT))
def family(request):
    return request.param, family_tokenizer(request.param)


def _codec(tok, tool_format="auto"):
    codec = ChatCodec(PromptBuilder(tok, PromptConfig(field="question")))
    codec.tool_format = codec.resolve(tool_format)[0]
    return codec


def _assistant_turn(tok, message):
    """What the family's template renders for one assistant message after a user turn."""
    user = [{"role": "user", "content": "12*34="}]
    tools = [CALCULATOR.schema()]
    prompt = tok.apply_chat_template(user, tools=tools, tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(user + [message], tools=tools, tokenize=False)
    assert full.startswith(prompt)
    return full[len(prompt) :]


def test_auto_picks_the_family_from_its_chat_template(family):
    name, tok = family
    assert detect_tool_format(tok.chat_template).name == FAMILY_FORMAT[name]


def test_a_template_without_tool_calls_falls_back_to_the_hermes_form(tiny_tokenizer):
    assert detect_tool_format(tiny_tokenizer.chat_template) is None
    assert resolve_tool_format("auto", tiny_tokenizer) == (HERMES, None)


def test_any_family_can_be_named_for_a_template_without_tool_calls(tiny_tokenizer):
    assert resolve_tool_format("llama3_json", tiny_tokenizer)[0] is LLAMA3_JSON


def test_a_family_the_template_cannot_render_is_a_one_line_user_error():
    with pytest.raises(
        UserError, match=r"'mistral' cannot be rendered .* writes tool calls as hermes; use auto or hermes"
    ):
        resolve_tool_format("mistral", family_tokenizer("qwen2_5"))


def test_hermes_and_qwen3_share_the_tool_call_tag_so_either_may_be_named():
    assert resolve_tool_format("hermes", family_tokenizer("qwen3"))[0] is HERMES
    assert resolve_tool_format("qwen3", family_tokenizer("qwen2_5"))[0] is QWEN3


def test_native_needs_a_shipped_response_template():
    with pytest.raises(UserError, match="native needs a tokenizer that ships a response_template"):
        resolve_tool_format("native", family_tokenizer("qwen2_5"))


def test_the_first_prompt_shows_the_tools_the_way_each_template_does(family):
    name, tok = family
    task = get_env_task("env/calculator:multiplication")
    env = task.make_env(task.generate(0))
    prompt = tok.decode(_codec(tok).start(env.reset(), env.tools))
    marker = {
        "qwen2_5": "<tools>\n{",
        "qwen3": "<tools>\n{",
        "llama3_1": "Given the following functions",
        "llama3_2": "Given the following functions",
        "mistral": '[AVAILABLE_TOOLS] [{"type": "function", "function": {"name": "calculator"',
    }[name]
    assert marker in prompt and '"calculator"' in prompt


def test_the_templates_own_rendering_of_a_call_parses_back(family):
    name, tok = family
    text = _assistant_turn(tok, {"role": "assistant", "content": "", "tool_calls": [CALL]})
    (call,) = TOOL_FORMATS[FAMILY_FORMAT[name]].parse(text)
    assert (call.name, call.arguments, call.error) == ("calculator", {"expression": "12*34"}, None)


def test_a_written_call_parses_back_in_every_format():
    for fmt in TOOL_FORMATS.values():
        (call,) = fmt.parse(fmt.write([("calculator", {"expression": "2*3"})]))
        assert (call.name, call.arguments) == ("calculator", {"expression": "2*3"}), fmt.name


def test_mistral_reads_every_call_of_the_list_and_their_ids():
    text = '[TOOL_CALLS] [{"name": "a", "arguments": {}, "id": "abcdefghi"}, {"name": "b", "arguments": {"x": 1}}]'
    calls = MISTRAL.parse(text)
    assert [(c.name, c.arguments, c.id) for c in calls] == [("a", {}, "abcdefghi"), ("b", {"x": 1}, None)]


def test_a_llama_call_may_open_with_the_python_tag():
    (call,) = LLAMA3_JSON.parse('<|python_tag|>{"name": "calculator", "parameters": {"expression": "1+1"}}')
    assert call.arguments == {"expression": "1+1"}


def test_prose_is_not_a_llama_call():
    assert LLAMA3_JSON.parse('The answer is {"x": 1}') == []


def test_a_call_inside_qwen3_thinking_is_not_a_call():
    text = '<think>maybe <tool_call>{"name": "calculator", "arguments": {}}</tool_call></think><answer>4</answer>'
    assert QWEN3.parse(text) == []
    assert len(HERMES.parse(text)) == 1  # Hermes has no think block


@pytest.mark.parametrize(
    "fmt, text, error",
    [
        (HERMES, "<tool_call>{oops</tool_call>", "tool call is not valid JSON"),
        (QWEN3, '<tool_call>["calculator"]</tool_call>', 'tool call must be a JSON object with a "name" string'),
        (LLAMA3_JSON, '{"name": "calculator", "parameters": {"expression": "1"}', "tool call is not valid JSON"),
        (LLAMA3_JSON, '{"name": "calculator", "parameters": [1]}', "arguments must be a JSON object"),
        (MISTRAL, "[TOOL_CALLS] [{'name': 'calculator'}]", "tool call is not valid JSON"),
        (MISTRAL, "[TOOL_CALLS] []", "empty list of tool calls"),
    ],
)
def test_a_malformed_call_is_one_error_call(fmt, text, error):
    (call,) = fmt.parse(text)
    assert call.error == error


def test_one_malformed_call_does_not_hide_the_good_ones():
    calls = parse_tool_calls(
        '<tool_call>{bad</tool_call><tool_call>{"name": "calculator", "arguments": {}}</tool_call>'
    )
    assert [c.error for c in calls] == ["tool call is not valid JSON", None]


def _env(tool_format):
    task = get_env_task("env/calculator:multiplication", EnvConfig(tool_format=tool_format))
    env = task.make_env(task.generate(0, {"digits_a": 2, "digits_b": 2}))
    env.reset()
    return env


def test_a_llama_json_call_runs_the_tool_and_the_result_goes_back_as_ipython():
    result = _env("llama3_json").step('{"name": "calculator", "parameters": {"expression": "12*34"}}')
    assert result.observation == [{"role": "ipython", "name": "calculator", "content": "408"}]


def test_a_mistral_result_carries_the_call_id_and_json_content():
    env = _env("mistral")
    ok = env.step('[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "12*34"}, "id": "abcdefghi"}]')
    assert ok.observation == [{"role": "tool", "name": "calculator", "content": "408", "tool_call_id": "abcdefghi"}]
    bad = env.step('[TOOL_CALLS] [{"name": "shell", "arguments": {}}]')
    (message,) = bad.observation
    assert message["tool_call_id"] == "c00020000"  # no id written: turn 2, call 0
    assert json.loads(message["content"]).startswith("error: unknown tool 'shell'")


@pytest.mark.parametrize(
    "fmt, text, error",
    [
        ("llama3_json", '{"name": "shell", "parameters": {}}', "error: unknown tool 'shell'; available: calculator"),
        (
            "llama3_json",
            '{"name": "calculator", "parameters": {"expression": 5}}',
            "error: argument 'expression' must be of type string",
        ),
        (
            "mistral",
            '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": 5}}]',
            "error: argument 'expression' must be of type string",
        ),
        (
            "qwen3",
            '<tool_call>{"name": "calculator", "arguments": {"expression": "2**"}}</tool_call>',
            "error: cannot evaluate",
        ),
    ],
)
def test_bad_calls_in_each_format_become_error_observations(fmt, text, error):
    env = _env(fmt)
    (message,) = env.step(text).observation
    content = json.loads(message["content"]) if fmt == "mistral" else message["content"]
    assert content.startswith(error) and env.stats["tool_errors"] == 1


# What each template renders after a tool-call turn whose end-of-turn token the policy wrote: the rest of the
# turn's end (Qwen's newline), the result, then the next generation prompt.
RESULT_TEXT = {
    "qwen2_5": "\n<|im_start|>user\n<tool_response>\n408\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    "qwen3": "\n<|im_start|>user\n<tool_response>\n408\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    "llama3_1": '<|start_header_id|>ipython<|end_header_id|>\n\n"408"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    "llama3_2": '<|start_header_id|>ipython<|end_header_id|>\n\n"408"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    "mistral": '[TOOL_RESULTS] {"content": 408, "call_id": "c00010000"}[/TOOL_RESULTS]',
}


def test_the_tool_result_is_rendered_the_way_the_template_expects(family):
    name, tok = family
    env = _env(FAMILY_FORMAT[name])
    call = TOOL_FORMATS[FAMILY_FORMAT[name]].write([("calculator", {"expression": "12*34"})])
    observation = env.step(call).observation
    assert tok.decode(_codec(tok).between_turns(observation, finished=True)) == RESULT_TEXT[name]


def _scripted_policy(fmt, expression, product):
    """Calls the calculator in ``fmt``'s syntax (written by hand), then answers with the number it got back."""
    calls = {
        "hermes": '<tool_call>\n{"name": "calculator", "arguments": {"expression": "%s"}}\n</tool_call>',
        "qwen3": '<think>\nuse the tool\n</think>\n\n<tool_call>\n{"name": "calculator", "arguments": '
        '{"expression": "%s"}}\n</tool_call>',
        "llama3_json": '{"name": "calculator", "parameters": {"expression": "%s"}}',
        "mistral": '[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "%s"}}]',
    }
    return lambda prompt: f"<answer>{product}</answer>" if product in prompt else calls[fmt] % expression


def test_an_episode_round_trips_through_the_calculator_in_each_family(family, scripted):
    name, tok = family
    task = get_env_task("env/calculator:multiplication")  # env.tool_format: auto
    problem = task.generate(0, {"digits_a": 2, "digits_b": 2})
    expression = problem.question.rstrip("=")
    a, b = expression.split("*")
    backend = type(scripted(str))(tok, _scripted_policy(FAMILY_FORMAT[name], expression, str(int(a) * int(b))))
    prompts = PromptBuilder(tok, PromptConfig(field="question"))
    (t,) = rollout_episodes([problem], {task.name: task}, backend, prompts, 1, 200, 2000, temperature=1.0, top_p=1.0)
    assert t.verdict.correct and t.info["tool_calls"] == 1 and t.info["tool_errors"] == 0 and t.info["turns"] == 2
    env_text = tok.decode([i for i, m in zip(t.response_ids, t.policy_mask) if m == 0])
    assert env_text == RESULT_TEXT[name].replace("408", str(int(a) * int(b)))


def test_mistral_keeps_the_tool_calls_token_that_decoding_drops():
    tok = family_tokenizer("mistral")
    codec = _codec(tok)
    ids = tok('[TOOL_CALLS] [{"name": "a", "arguments": {}}]</s>', add_special_tokens=False).input_ids
    text = tok.decode(ids, skip_special_tokens=True)
    assert text == ' [{"name": "a", "arguments": {}}]'
    assert codec.action_text(ids, text) == '[TOOL_CALLS] [{"name": "a", "arguments": {}}]'


def test_reference_episodes_write_calls_in_the_familys_syntax(family):
    name, tok = family
    task = get_env_task("env/calculator:multiplication")
    problem = task.generate(3, {"digits_a": 3, "digits_b": 3})
    prompts = PromptBuilder(tok, PromptConfig(field="question"))
    _, response_ids, mask = reference_episode(task, problem, prompts, tok.eos_token_id)
    first_turn = tok.decode(response_ids[: mask.index(0)], skip_special_tokens=False)
    assert first_turn.startswith(
        TOOL_FORMATS[FAMILY_FORMAT[name]].write([("calculator", {"expression": problem.question.rstrip("=")})])
    )


def test_a_shipped_response_template_is_used_for_parsing():
    from trl.chat_template_utils import qwen3_template

    tok = family_tokenizer("qwen3")
    tok.response_template = qwen3_template
    fmt, shipped = resolve_tool_format("native", tok)
    assert fmt is QWEN3 and shipped is qwen3_template
    (call,) = fmt.parse('<tool_call>\n{"name": "calculator", "arguments": {"expression": "1"}}\n</tool_call>', shipped)
    assert (call.name, call.arguments) == ("calculator", {"expression": "1"})
    assert fmt.parse("<tool_call>{oops</tool_call>", shipped)[0].error == "tool call is not valid JSON"


def test_several_mistral_calls_get_one_result_each_rendered_by_the_template():
    env = _env("mistral")
    call = '{"name": "calculator", "arguments": {"expression": "%s"}}'
    observation = env.step("[TOOL_CALLS] [" + ", ".join(call % e for e in ("1+1", "2*3")) + "]").observation
    assert [(m["content"], m["tool_call_id"]) for m in observation] == [("2", "c00010000"), ("6", "c00010001")]
    tok = family_tokenizer("mistral")
    assert tok.decode(_codec(tok).between_turns(observation, finished=True)) == (
        '[TOOL_RESULTS] {"content": 2, "call_id": "c00010000"}[/TOOL_RESULTS]'
        '[TOOL_RESULTS] {"content": 6, "call_id": "c00010001"}[/TOOL_RESULTS]'
    )


def test_calls_past_the_per_turn_limit_are_answered_with_an_addressed_error():
    env = _env("mistral")
    calls = ", ".join(['{"name": "calculator", "arguments": {"expression": "1"}}'] * 5)
    observation = env.step(f"[TOOL_CALLS] [{calls}]").observation
    assert len(observation) == 5 and observation[-1]["tool_call_id"] == "c00010004"
    assert json.loads(observation[-1]["content"]) == "error: at most 4 tool calls per turn"


@pytest.mark.parametrize("name", ["env/search", "env/calculator:multiplication"])
def test_every_tool_environment_follows_env_tool_format(name):
    """env/search built its environment with ToolEnvironment's own ``tool_format="auto"``: env.tool_format was
    ignored there."""
    task = get_env_task(name, EnvConfig(tool_format="mistral"))
    env = task.make_env(task.generate(0, "easy"))
    assert env.requested_tool_format == "mistral"
