"""``env/openenv:<module>:<Class>`` and ``env/openenv:<base URL>``: OpenEnv environments as polyrl environments.

``env/openenv:my_envs:GuessNumber`` runs an ``openenv.core.Environment`` subclass in this process;
``env/openenv:http://127.0.0.1:8000`` plays a running OpenEnv server (``create_app(...)`` served by uvicorn, a hub
environment started locally) through OpenEnv's own client (:mod:`polyrl.envs.openenv_sessions`).

* **Problems.** An environment with a ``TaskProvider`` (``list_splits``/``num_tasks``) gives a real held-out split:
  problem ``k`` of polyrl's train split is ``reset(split="train", index=k mod n)``, of the eval split the same in
  its ``test`` (or ``eval``, ``validation``, ``valid``, ``dev``) split. Without one, a problem is a seed:
  ``reset(seed=...)``, the train and eval seeds drawn from different streams.
* **Actions** from the policy's turns as :mod:`polyrl.envs.openenv_actions` says: the text itself (a one-string
  action), a tool call of the action's schema (any other typed action), or the calls of the tools MCP lists. In the
  tool kinds a turn without a tool call ends the episode (``no_tool_call``), as it ends a TRL or OpenAI agent loop.
* **Rewards**: each ``Observation.reward`` is paid as it comes (None is 0; the return is held in [-1, 1]);
  ``done`` ends the episode, and so does ``env.max_turns`` (default 10). In process, a rubric's named parts
  (``env.rubric.named_rubrics()``) are summed over the episode and logged as ``reward_terms/rubric/<name>``.
* **No reference episodes**: OpenEnv has no way to say what a winning episode is, so these tasks give the SFT warm
  start nothing (``sft.enabled: false``, or mix in tasks that have references).
"""

from __future__ import annotations

from polyrl.envs.env_registry import EnvConfig, register_env
from polyrl.envs.environment import Environment, EnvTask, Message, StepResult
from polyrl.envs.hub_episode import BuiltByName, HubEnvironment
from polyrl.envs.openenv_actions import (
    LIST_TOOLS,
    ActionKind,
    action_kind,
    call_result,
    call_tool_action,
    listed_tools,
    observation_text,
)
from polyrl.envs.openenv_sessions import ActionRejected, LocalSource, RemoteSource
from polyrl.envs.tool_formats import UsesToolFormat
from polyrl.envs.tools import Tool, ToolError, tool_results
from polyrl.tasks.base import DEFAULT_DIFFICULTY, Difficulty, Problem, rng_for

DEFAULT_MAX_TURNS = 10
"""Turns of an episode unless ``env.max_turns`` says (OpenEnv environments end themselves with ``done``)."""
EVAL_SPLITS = ("test", "eval", "validation", "valid", "dev")
"""A TaskProvider's split that polyrl's held-out (eval) split plays, the first of these it has."""
URL_SCHEMES = ("http://", "https://", "ws://", "wss://")


class OpenEnvEpisode(HubEnvironment):
    """One session of the environment: reset with the problem's task or seed, stepped with the policy's actions."""

    def __init__(self, problem: Problem, task: OpenEnvTask):
        super().__init__(problem, task.max_turns, task.requested_tool_format)
        self.bind_tool_format(task.tool_format, task.response_template)
        self.task = task
        self.kind: ActionKind = task.kind
        self.session = None
        self.by_name: dict[str, Tool] = {}
        self.turn_paid, self.done = 0.0, False

    def reset(self) -> list[Message]:
        self.session = self.task.source.open()
        first = self.session.reset(**self.task.reset_arguments(self.problem))
        if self.kind.kind == "mcp":
            self.tools = listed_tools(self.session.step(dict(LIST_TOOLS))["observation"])
        elif self.kind.kind == "tool":
            self.tools = [self.kind.tool]
        self.by_name = {t["function"]["name"]: self._tool(t["function"]) for t in self.tools}
        text = observation_text(first["observation"]) or f"{self.task.name}: the episode begins."
        return [{"role": "user", "content": text}]

    def _tool(self, function: dict) -> Tool:
        name = function["name"]

        def run(arguments: dict, timeout_s: float) -> str:
            action = call_tool_action(name, arguments) if self.kind.kind == "mcp" else arguments
            try:
                result = self.session.step(action)
            except ActionRejected as exc:
                raise ToolError(f"invalid action: {exc}") from None
            self.turn_paid += self.pay(result["reward"])
            self.done = self.done or result["done"]
            if self.kind.kind != "mcp":
                return observation_text(result["observation"]) or "(no output)"
            text, ok = call_result(result["observation"])
            if not ok:
                raise ToolError(text.removeprefix("error: "))
            return text or "(no output)"

        return Tool(name, function.get("description", ""), function.get("parameters") or {}, run)

    def step(self, action: str) -> StepResult:
        self.turn += 1
        if self.kind.kind == "text":
            return self._text_step(action)
        calls = self.tool_format.parse(action, self.response_template)
        if not calls:
            return self.finish(0.0, "no_tool_call", action)
        self.turn_paid = 0.0
        observation = tool_results(self, calls, self.by_name, self.task.tool_timeout_s, stop=lambda: self.done)
        if self.done:
            return self.finish(self.turn_paid, "done", action)
        return self.go_on(self.turn_paid, observation, action)

    def _text_step(self, action: str) -> StepResult:
        try:
            result = self.session.step({self.kind.field: action})
        except ActionRejected as exc:
            self.stats["invalid_actions"] += 1
            return self.go_on(0.0, [{"role": "user", "content": f"error: the environment rejected that: {exc}"}])
        paid = self.pay(result["reward"])
        if result["done"]:
            return self.finish(paid, "done", action)
        return self.go_on(paid, [{"role": "user", "content": observation_text(result["observation"])}], action)

    def logged_terms(self) -> dict[str, float]:
        terms = self.session.terms if self.session is not None else {}
        return {f"rubric/{part}": score for part, score in terms.items()}

    def close(self) -> None:
        if self.session is not None:
            self.session.close()


class OpenEnvTask(BuiltByName, UsesToolFormat, EnvTask):
    category = "openenv"

    def __init__(self, argument: str, config: EnvConfig):
        super().__init__("tags")
        label = f"env/openenv:{argument}"
        self.env_config = config
        if argument.startswith(URL_SCHEMES):
            self.source = RemoteSource(argument, label, config.server_timeout_s)
        else:
            self.source = LocalSource(argument, label)
        self.kind = action_kind(self.source.action_schema, self.source.mcp)
        self.max_turns = config.max_turns or DEFAULT_MAX_TURNS
        self.tool_timeout_s = config.tool_timeout_s
        self.use_tool_format(config.tool_format)
        splits = self.source.splits or {}
        self.task_splits = {}
        if splits:
            train = "train" if "train" in splits else next(iter(splits))
            held_out = next((s for s in EVAL_SPLITS if s in splits), train)
            self.task_splits = {"train": (train, splits[train]), "eval": (held_out, splits[held_out])}
        where = "a server" if isinstance(self.source, RemoteSource) else "in process"
        tasks = ", ".join(f"{s} {n} tasks" for s, n in splits.items()) or "seeded resets"
        if splits and self.task_splits["eval"][0] == self.task_splits["train"][0]:
            tasks += "; no held-out split: eval plays training tasks"
        self.description = f"OpenEnv environment {argument} ({where}; {self.kind.kind} actions; {tasks})"

    def generate(self, seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, split: str = "train") -> Problem:
        seed = int(seed)
        if self.task_splits:
            name, count = self.task_splits.get(split, self.task_splits["train"])
            answer = {"split": name, "index": seed % max(count, 1), "seed": seed}
            question = f"{self.name}: task {answer['index']} of split {name}"
        else:
            answer = {"seed": rng_for(self.name, split, seed, {}).randrange(2**31)}
            question = f"{self.name}: episode with seed {answer['seed']}"
        return Problem(self.name, question, question, answer, None, seed, split, None, {})

    def reset_arguments(self, problem: Problem) -> dict:
        return dict(problem.answer)

    def check(self, answer: str, problem: Problem) -> float:
        return 0.0  # only a played episode can win

    def make_env(self, problem: Problem) -> Environment:
        return OpenEnvEpisode(problem, self)


@register_env("openenv", needs_argument=True)
def openenv_env(argument: str, config: EnvConfig) -> OpenEnvTask:
    return OpenEnvTask(argument, config)
