"""A tool-using agent written against the OpenAI API, as a user writes one: a calculator tool, up to three
requests, the episode's reward from the last answer. polyrl plays it as a harness task (docs/environments.md,
"Your own agent as the harness"):

    PYTHONPATH=examples polyrl train --config configs/harness_demo.yaml
"""

import ast
import json
import operator

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]


def calc(expr: str) -> str:
    """``+ - *`` over integers, parsed (never ``eval``: the policy writes the expression, and this agent runs
    in the trainer's process)."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def value(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        raise ValueError("only integers and + - *")

    try:
        if len(expr) > 64:
            raise ValueError("expression longer than 64 characters")
        return str(value(ast.parse(expr, mode="eval").body))
    except (SyntaxError, ValueError) as exc:
        return f"error: {exc}"


def agent(client, problem):
    messages = [{"role": "user", "content": problem.prompt}]
    for _ in range(3):
        reply = client.chat.completions.create(model="polyrl-policy", messages=messages, tools=TOOLS, max_tokens=64)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "name": "calc", "content": calc(str(args.get("expr", "")))}
            )
    answer = message.content or ""
    correct = f"<answer>{problem.answer}</answer>" in answer
    return {
        "reward": float(correct),
        "correct": correct,
        "requests": (len(messages) + 1) // 2,
        "answer_chars": len(answer),
    }


def shaped_agent(client, problem):
    """The calculator agent with a graded reward (shorter final answers score higher), so that a random
    policy's groups carry signal."""
    result = agent(client, problem)
    return {**result, "reward": result["reward"] + 1.0 / (1 + result["answer_chars"])}
