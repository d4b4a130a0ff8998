import json

import pytest
from pydantic import ValidationError

from polyrl.envs import EnvConfig, get_env_task
from polyrl.envs.sandbox import SandboxLimits
from polyrl.envs.tool_formats import HERMES, LLAMA3_JSON, MISTRAL, describe_tools
from polyrl.envs.tool_use import CALCULATOR, python_tool
from polyrl.envs.tools import call_tool, check_arguments, parse_tool_calls
from polyrl.errors import UserError

TOOLS = {"calculator": CALCULATOR}


def test_tagged_call_parses_name_and_arguments():
    (call,) = parse_tool_calls('x <tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>')
    assert (call.name, call.arguments, call.error) == ("calculator", {"expression": "2*3"}, None)


def test_openai_style_string_arguments_are_decoded():
    (call,) = parse_tool_calls(
        '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}</tool_call>'
    )
    assert call.arguments == {"expression": "1+1"}


def test_text_that_is_not_json_is_an_error_call():
    (call,) = parse_tool_calls("<tool_call>calculator(2*3)</tool_call>")
    assert call.error == "tool call is not valid JSON"
    assert call_tool(TOOLS, call, 1.0) == ("error: tool call is not valid JSON", False)


def test_unclosed_tag_counts_as_a_bad_call():
    calls = parse_tool_calls('<tool_call>{"name": "calculator"')
    assert [c.error for c in calls] == ["unclosed <tool_call> tag"]


def test_unknown_tool_and_garbage_arguments_become_error_results():
    unknown = parse_tool_calls('<tool_call>{"name": "shell", "arguments": {}}</tool_call>')[0]
    assert call_tool(TOOLS, unknown, 1.0)[0].startswith("error: unknown tool 'shell'")
    wrong_type = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": {"expression": 5}}</tool_call>')[0]
    assert call_tool(TOOLS, wrong_type, 1.0) == ("error: argument 'expression' must be of type string", False)
    bad_expr = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": {"expression": "2**"}}</tool_call>')[0]
    result, ok = call_tool(TOOLS, bad_expr, 1.0)
    assert not ok and result.startswith("error: cannot evaluate")


def test_schema_check_reports_missing_and_extra_arguments():
    schema = CALCULATOR.parameters
    assert check_arguments(schema, {}) == "missing argument 'expression'"
    assert check_arguments(schema, {"expression": "1", "x": 1}) == "unknown argument 'x'"
    assert check_arguments(schema, {"expression": "1"}) is None


def test_calculator_is_exact():
    assert CALCULATOR.run({"expression": "1234*5678"}, 1.0) == "7006652"
    assert CALCULATOR.run({"expression": "1/3+1/6"}, 1.0) == "1/2"


def _env():
    task = get_env_task("env/calculator:multiplication")
    problem = task.generate(0, {"digits_a": 4, "digits_b": 4})
    env = task.make_env(problem)
    env.reset()
    return problem, env


def test_answer_together_with_a_tool_call_is_an_error_observation():
    _, env = _env()
    result = env.step(
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call><answer>2</answer>'
    )
    assert not result.done
    assert "answer given together with a tool call" in result.observation[0]["content"]
    assert result.observation[1] == {"role": "tool", "name": "calculator", "content": "2"}
    assert env.stats == {"tool_calls": 1, "tool_errors": 0, "invalid_actions": 1}


def test_text_without_call_or_answer_is_an_invalid_action_then_the_turn_limit_ends_it():
    _, env = _env()
    assert not env.step("hello").done
    assert not env.step("<tool_call>nope</tool_call>").done
    end = env.step("still nothing")
    assert end.done and end.info["end_reason"] == "max_turns" and not end.info["success"]
    assert env.stats == {"tool_calls": 1, "tool_errors": 1, "invalid_actions": 1}


def test_a_correct_answer_after_the_tool_result_succeeds():
    problem, env = _env()
    a, b = problem.question.rstrip("=").split("*")
    obs = env.step(
        f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{a}*{b}"}}}}</tool_call>'
    ).observation
    end = env.step(f"<answer>{obs[0]['content']}</answer>")
    assert end.done and end.info["success"] and end.reward == 1.0


def test_brackets_nested_past_the_json_parsers_depth_are_an_error_call_not_an_exception():
    (call,) = parse_tool_calls("<tool_call>" + "[" * 100_000 + "</tool_call>")
    assert call.error == "tool call is not valid JSON"


def test_the_tool_listing_shows_the_call_syntax_of_the_chosen_format():
    tools = [CALCULATOR.schema()]
    assert describe_tools(tools) == (
        'Tools: calculator(expression). Call: <tool_call>{"name":...,"arguments":{...}}</tool_call>'
    )
    assert describe_tools(tools, MISTRAL) == (
        'Tools: calculator(expression). Call: [TOOL_CALLS] [{"name":...,"arguments":{...}}]'
    )


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3_JSON, MISTRAL], ids=lambda f: f.name)
def test_the_natural_tool_listing_states_each_tool_and_shows_a_call_the_format_parses(fmt):
    tools = [CALCULATOR.schema(), python_tool(SandboxLimits()).schema()]
    lines = describe_tools(tools, fmt, natural=True).splitlines()
    assert lines[1:3] == [
        "- calculator(expression: string): Evaluate an arithmetic expression with + - * / and parentheses.",
        "- python(code: string): Run Python code in a sandbox and return what it prints.",
    ]
    (call,) = fmt.parse(lines[4])  # the call written out, with a placeholder where the argument goes
    assert (call.name, call.arguments, call.error) == ("calculator", {"expression": "<expression>"}, None)


def test_an_unknown_tool_format_is_a_user_error():
    with pytest.raises(UserError, match="unknown tool format 'llama'; choose one of auto, hermes"):
        get_env_task("env/calculator:addition").use_tool_format("llama")
    with pytest.raises(ValidationError):
        EnvConfig(tool_format="llama")


def test_a_task_configured_for_llama_json_writes_and_reads_that_syntax():
    task = get_env_task("env/calculator:multiplication", EnvConfig(tool_format="llama3_json"))
    problem = task.generate(0, {"digits_a": 2, "digits_b": 2})
    call, answer = task.reference_actions(problem)
    assert call == json.dumps({"name": "calculator", "parameters": {"expression": problem.question.rstrip("=")}})
    env = task.make_env(problem)
    env.reset()
    assert env.step(call).observation[0]["content"] == problem.solution
    assert env.step(answer).info["success"]
