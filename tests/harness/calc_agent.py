"""A tool-using agent written against the OpenAI API, as a user would write it: a calculator tool, up to
three requests, the episode's reward from the last answer (the test's harness; see docs/environments.md)."""

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
    return {"reward": float(correct), "requests": (len(messages) + 1) // 2, "answer_chars": len(answer)}


def shaped_agent(client, problem):
    """The calculator agent with a graded reward (shorter final answers score higher), so that a random
    policy's groups carry signal."""
    result = agent(client, problem)
    return {**result, "reward": result["reward"] + 1.0 / (1 + result["answer_chars"])}


async def async_agent(client, problem):
    reply = await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": problem.prompt}]
    )
    return 1.0 if reply.choices[0].message.content else 0.0


def url_agent(base_url, problem):
    import httpx

    body = {"model": "policy", "messages": [{"role": "user", "content": problem.prompt}]}
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=30).json()
    return None if "choices" in reply else 0.0  # None: the task's verifier scores the completion


def raising_agent(client, problem):
    client.chat.completions.create(model="policy", messages=[{"role": "user", "content": problem.prompt}])
    raise RuntimeError("the agent's own bug")


def hanging_agent(client, problem):
    import time

    time.sleep(30)


def editing_agent(client, problem):
    """Sends a second request whose history rewrites the first reply: a new segment."""
    first = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": problem.prompt}])
    edited = [
        {"role": "user", "content": problem.prompt},
        {"role": "assistant", "content": "something else than " + (first.choices[0].message.content or "")},
        {"role": "user", "content": "again"},
    ]
    client.chat.completions.create(model="policy", messages=edited)
    return 0.5


def logprob_agent(client, problem):
    """Asks for the behaviour log-probs of its completion and reports their sum."""
    reply = client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": problem.prompt}], logprobs=True
    )
    return {"reward": 0.0, "logprob_sum": sum(t.logprob for t in reply.choices[0].logprobs.content)}
