"""``env/trl:<module>:<Class>``: an environment class written for TRL's ``GRPOTrainer(environment_factory=...)``,
trained unchanged over a dataset's rows.

.. code-block:: yaml

    tasks:
      - {name: "env/trl:my_envs:WordleEnv", dataset: prompts.jsonl}   # a prompt column, and any others

* **Episodes.** Each episode takes an instance of the class (``Class()``, or whatever the named factory returns;
  instances are pooled and reused, constructed once and reset often, as TRL does; they are handed out in the
  rollout's order of episodes, so a class that counts its resets plays alike in every run) and calls ``reset(**row)`` with
  every column of its row. A string ``reset`` returns is appended to the row prompt's last message, as TRL appends
  it; ``None`` appends nothing. The prompt is the row's ``prompt`` column (``dataset.prompt`` names another), a
  string (one user message) or a list of chat messages. Without a dataset the class owns its data: one empty row,
  and ``reset()`` gives the prompt.
* **Tools** are the class's public methods (all but ``reset`` and ``get_reward``; no leading underscore), with the
  schemas transformers' ``get_json_schema`` reads from their type hints and Google-style docstrings, which is what
  TRL puts in the chat template; a method it cannot read is one line when the run starts. A turn with tool calls
  runs them (a method that raises returns ``error: <message>`` and counts in ``tool_errors``; async methods are
  awaited); a turn without one ends the episode (``answered``), as TRL's tool loop ends.
* **Reward**: ``get_reward()``, called once when the episode ends (awaited when async), paid on the last turn (the
  return held in [-1, 1], success at 1: :mod:`polyrl.envs.hub_episode`). A class without ``get_reward`` earns 0
  from the environment: give its task reward terms of your own (``reward.terms``). TRL's ``reward_funcs`` that
  read the instances (``environments=``) are not called: move that reading into ``get_reward``.
* **Rows and splits**: ``dataset.eval_path``/``eval_split``, else a row is held out when the hash of its prompt is
  below ``eval_fraction``; when that leaves either side empty (every row has the same prompt, as when the class
  draws its own game in ``reset``), both splits play every row. The other dataset fields do not apply. Problem
  ``k`` of a split plays row ``k mod n``, with a random state of its own (seeded from the problem:
  :class:`~polyrl.envs.hub_episode.IsolatedRandom`), so a class that draws its game from ``random`` plays the same
  game in every episode of a group, other games on the held-out problems, and the same games in every run.
  Every call into the class runs under that state and its lock, so the calls of a class run one at a time.
* **No reference episodes**: nothing says what a winning episode of a TRL class is.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from typing import Any

from polyrl.envs.env_registry import EnvConfig, register_env
from polyrl.envs.environment import Environment, EnvTask, Message, StepResult
from polyrl.envs.hub_episode import BuiltByName, HubEnvironment, IsolatedRandom, import_object
from polyrl.envs.tool_formats import UsesToolFormat
from polyrl.envs.tools import Tool, ToolError, tool_results
from polyrl.errors import UserError
from polyrl.tasks.base import DEFAULT_DIFFICULTY, Difficulty, Problem, rng_for

DEFAULT_MAX_TURNS = 10
"""Turns of an episode unless ``env.max_turns`` says (TRL's tool loop has no limit of its own by default)."""
RESERVED = ("reset", "get_reward")


def _awaited(value: Any) -> Any:
    return asyncio.run(value) if inspect.isawaitable(value) else value


def _tool_methods(instance, name: str) -> list[dict[str, Any]]:
    """The schemas of the class's public methods, as TRL finds them (functions on the class, not properties)."""
    from transformers.utils import get_json_schema

    tools = []
    for member, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction):
        if member in RESERVED or member.startswith("_"):
            continue
        try:
            schema = get_json_schema(getattr(instance, member))
        except Exception as exc:  # transformers' DocstringParsingException, TypeHintParsingException
            raise UserError(f"{name}: method {member!r} cannot be a tool ({exc})") from None
        schema["function"].pop("return", None)
        tools.append(schema)
    return tools


def _prompt_messages(row: dict[str, Any], column: str) -> list[Message]:
    prompt = row.get(column)
    if isinstance(prompt, list):
        return [dict(m) for m in prompt]
    return [{"role": "user", "content": "" if prompt is None else str(prompt)}]


class TrlEpisode(HubEnvironment):
    """One episode: an instance from the pool, reset with the row, its methods as tools."""

    def __init__(self, problem: Problem, task: TrlTask):
        super().__init__(problem, task.max_turns, task.requested_tool_format)
        self.bind_tool_format(task.tool_format, task.response_template)
        self.task = task
        self.random = IsolatedRandom(int(problem.answer["seed"]))
        self.instance = task.acquire(self.random)  # here, in the rollout's order, so a run hands them out alike
        self.tools = task.tools
        self.by_name = {t["function"]["name"]: self._tool(t["function"]) for t in task.tools}

    def _call(self, fn, *args, **kwargs) -> Any:
        with self.random.active():
            return _awaited(fn(*args, **kwargs))

    def reset(self) -> list[Message]:
        row = self.task.row(self.problem)
        observation = self._call(self.instance.reset, **row)
        messages = _prompt_messages(row, self.task.prompt_column)
        if isinstance(observation, str) and isinstance(messages[-1].get("content"), str):
            messages[-1]["content"] += observation
        return messages

    def _tool(self, function: dict) -> Tool:
        name = function["name"]

        def run(arguments: dict, timeout_s: float) -> str:
            try:
                result = self._call(getattr(self.instance, name), **arguments)
            except Exception as exc:  # what TRL reports to the policy as {"error": str(exc)}
                raise ToolError(str(exc) or type(exc).__name__) from None
            return json.dumps(result, ensure_ascii=False, default=str) if isinstance(result, list) else str(result)

        return Tool(name, function.get("description", ""), function.get("parameters") or {}, run)

    def step(self, action: str) -> StepResult:
        self.turn += 1
        calls = self.tool_format.parse(action, self.response_template)
        if not calls:
            return self._end("answered", action)
        observation = tool_results(self, calls, self.by_name, self.task.tool_timeout_s)
        if self.turn >= self.max_turns:
            return self._end("max_turns", action)
        return StepResult(observation, 0.0, False)

    def _end(self, reason: str, action: str) -> StepResult:
        get_reward = getattr(self.instance, "get_reward", None)
        reward = self._call(get_reward) if callable(get_reward) else 0.0
        return self.finish(self.pay(reward), reason, action)

    def close(self) -> None:
        if self.instance is not None:
            instance, self.instance = self.instance, None
            self.task.release(instance)


class TrlTask(BuiltByName, UsesToolFormat, EnvTask):
    category = "trl"

    def __init__(self, path: str, config: EnvConfig, dataset: Any = None):
        super().__init__("tags")
        label = f"env/trl:{path}"
        self.env_config, self.dataset = config, dataset
        self.factory = import_object(path, label)
        if not callable(self.factory):
            raise UserError(f"{label}: {path} is not a class (or a function returning an environment)")
        self.label = label
        self._pool: list[Any] = []
        self._lock = threading.Lock()
        probe = self._construct(IsolatedRandom(0))
        if not callable(getattr(probe, "reset", None)):
            raise UserError(f"{label}: {path} is not a TRL environment class: its instances have no reset method")
        self.tools = _tool_methods(probe, label)
        self._pool.append(probe)
        self.prompt_column = "prompt"
        self.splits = self._rows(dataset, label)
        self.max_turns = config.max_turns or DEFAULT_MAX_TURNS
        self.tool_timeout_s = config.tool_timeout_s
        self.use_tool_format(config.tool_format)
        counts = ", ".join(f"{s} {len(r)} rows" for s, r in self.splits.items())
        self.description = f"TRL environment class {path} ({len(self.tools)} tools; {counts})"

    def _construct(self, random_state: IsolatedRandom):
        try:
            with random_state.active():
                return self.factory()
        except Exception as exc:
            raise UserError(f"{self.label}: cannot construct an instance ({type(exc).__name__}: {exc})") from None

    def _rows(self, dataset, label: str) -> dict[str, list[dict]]:
        if dataset is None:
            return {"train": [{}], "eval": [{}]}
        from polyrl.tasks.dataset_rows import load_records, prompt_hash

        if "prompt" in dataset.model_fields_set:
            self.prompt_column = dataset.prompt
        train = load_records(dataset.path, dataset, dataset.split)
        if self.prompt_column not in train[0]:
            raise UserError(f"{label}: dataset {dataset.path} has no column {self.prompt_column!r}")
        if dataset.eval_path is not None or dataset.eval_split is not None:
            return {
                "train": train,
                "eval": load_records(dataset.eval_path or dataset.path, dataset, dataset.eval_split or dataset.split),
            }
        key = lambda row: json.dumps(row.get(self.prompt_column), sort_keys=True, default=str)
        held = [prompt_hash(key(row)) < dataset.eval_fraction for row in train]
        eval_rows = [r for r, h in zip(train, held) if h]
        train_rows = [r for r, h in zip(train, held) if not h]
        if not eval_rows or not train_rows:
            return {"train": train, "eval": train}
        return {"train": train_rows, "eval": eval_rows}

    def generate(self, seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, split: str = "train") -> Problem:
        seed = int(seed)
        rows = self.splits.get(split, self.splits["train"])
        index = seed % len(rows)
        prompt = _prompt_messages(rows[index], self.prompt_column)[-1].get("content")
        question = prompt if isinstance(prompt, str) and prompt else f"{self.name}: row {index}"
        answer = {"row": index, "seed": rng_for(self.name, split, seed, {}).randrange(2**31)}
        return Problem(self.name, question, question, answer, None, seed, split, None, {})

    def row(self, problem: Problem) -> dict[str, Any]:
        rows = self.splits.get(problem.split, self.splits["train"])
        return dict(rows[problem.answer["row"]])

    def acquire(self, random_state: IsolatedRandom):
        """An instance for one episode: a pooled one (reset by the episode), or a new one when all are in use."""
        with self._lock:
            if self._pool:
                return self._pool.pop(0)
        return self._construct(random_state)

    def release(self, instance) -> None:
        with self._lock:
            self._pool.append(instance)

    def check(self, answer: str, problem: Problem) -> float:
        return 0.0  # only a played episode can win

    def make_env(self, problem: Problem) -> Environment:
        return TrlEpisode(problem, self)


@register_env("trl", needs_argument=True, takes_dataset=True)
def trl_env(argument: str, config: EnvConfig, dataset: Any = None) -> TrlTask:
    return TrlTask(argument, config, dataset)
