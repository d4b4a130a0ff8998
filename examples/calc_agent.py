"""A tool-using agent written against the OpenAI API, as a user writes one: a calculator tool, up to three
requests, the episode's reward from the last answer. polyrl plays it as a harness task (docs/environments.md,
"Your own agent as the harness"):

    PYTHONPATH=examples polyrl train --config configs/harness_demo.yaml
"""

import json

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
    if not set(expr) <= set("0123456789+-*() "):
        return "error: only integers and + - * ( )"
    try:
        return str(eval(expr, {"__builtins__": {}}))  # the character check above admits only arithmetic
    except Exception as exc:
        return f"error: {exc}"


def agent(client, problem):
    messages = [{"role": "user", "content": problem.prompt}]
    for _ in range(3):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, max_tokens=64)
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
