"""Agents for the harness tests: each misbehaves in one way a user's agent can (raises, never returns, edits
its history, asks for log-probs), or talks to the endpoint without the openai client."""


async def async_agent(client, problem):
    reply = await client.chat.completions.create(
        model="polyrl-policy", messages=[{"role": "user", "content": problem.prompt}]
    )
    return 1.0 if reply.choices[0].message.content else 0.0


def url_agent(base_url, problem):
    import httpx

    body = {"model": "polyrl-policy", "messages": [{"role": "user", "content": problem.prompt}]}
    reply = httpx.post(f"{base_url}/chat/completions", json=body, timeout=30).json()
    return None if "choices" in reply else 0.0  # None: the task's verifier scores the completion


def raising_agent(client, problem):
    client.chat.completions.create(model="polyrl-policy", messages=[{"role": "user", "content": problem.prompt}])
    raise RuntimeError("the agent's own bug")


def hanging_agent(client, problem):
    import time

    time.sleep(30)


def editing_agent(client, problem):
    """Sends a second request whose history rewrites the first reply: a new segment."""
    first = client.chat.completions.create(
        model="polyrl-policy", messages=[{"role": "user", "content": problem.prompt}]
    )
    edited = [
        {"role": "user", "content": problem.prompt},
        {"role": "assistant", "content": "something else than " + (first.choices[0].message.content or "")},
        {"role": "user", "content": "again"},
    ]
    client.chat.completions.create(model="polyrl-policy", messages=edited)
    return 0.5


def logprob_agent(client, problem):
    """Asks for the behaviour log-probs of its completion and reports their sum."""
    reply = client.chat.completions.create(
        model="polyrl-policy", messages=[{"role": "user", "content": problem.prompt}], logprobs=True
    )
    return {"reward": 0.0, "logprob_sum": sum(t.logprob for t in reply.choices[0].logprobs.content)}


def streaming_agent(client, problem):
    """Reads its completion as a stream of chunks."""
    stream = client.chat.completions.create(
        model="polyrl-policy", messages=[{"role": "user", "content": problem.prompt}], stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    return {"reward": float(bool(text)), "chars": len(text)}


def chatty_agent(client, problem):
    """Keeps the conversation going until the endpoint refuses: the episode's token budget."""
    import openai

    messages = [{"role": "user", "content": problem.prompt}]
    for _ in range(100):
        try:
            reply = client.chat.completions.create(model="polyrl-policy", messages=messages)
        except openai.BadRequestError:
            return 0.0
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "more"}]
    return 1.0


def short_agent(client, problem):
    """Asks for as many tokens as its problem's seed (1, 2, 3, …)."""
    reply = client.chat.completions.create(
        model="polyrl-policy", messages=[{"role": "user", "content": problem.prompt}], max_tokens=problem.seed
    )
    return float(reply.choices[0].finish_reason == "length")


def rewriting_agent(client, problem):
    """Sends a new, unrelated history with every request (each opens a sequence of its own) until refused."""
    import openai

    for k in range(100):
        try:
            client.chat.completions.create(
                model="polyrl-policy", messages=[{"role": "user", "content": f"{problem.prompt} {k}"}]
            )
        except openai.BadRequestError:
            return 0.0
    return 1.0


_EPISODES = iter(range(10**9))


def huge_reward_agent(client, problem):
    """Returns ±1e200 in turn: finite, but its square is not."""
    client.chat.completions.create(model="polyrl-policy", messages=[{"role": "user", "content": problem.prompt}])
    return 1e200 if next(_EPISODES) % 2 else -1e200
