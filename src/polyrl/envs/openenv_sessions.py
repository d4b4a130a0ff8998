"""Where an OpenEnv environment runs: in this process (``env/openenv:<module>:<Class>``) or behind an OpenEnv
server (``env/openenv:<base URL>``, reached through OpenEnv's own ``GenericEnvClient``).

A *source* knows the environment's action schema, whether it speaks MCP, and its task splits (a ``TaskProvider``),
and opens one *session* per episode. Sessions reset and step with the wire format of an OpenEnv server
(``{"observation": {...}, "reward": ..., "done": ...}``), so an episode is played the same way in both places.

* In process: one instance of the class per episode, reset with the arguments its ``reset`` accepts (as the server
  passes them). A class without ``SUPPORTS_CONCURRENT_SESSIONS`` has its calls run one at a time (a lock per
  class); its instances still coexist, one per live episode. Its rubric's named parts are recorded per episode.
* Remote: one WebSocket session per episode, opened at ``reset`` and closed when the episode ends (and for every
  unfinished episode when a rollout fails), so none outlives its episode. Each message waits at most
  ``env.server_timeout_s``; a server that dies or stalls mid-episode fails that step, which ends the episode as
  ``env_error`` (counted in ``end/env_error/<env>``). A server that refuses a session for capacity is one line
  naming ``max_concurrent_envs``: polyrl opens a session per episode it plays at once.
"""

from __future__ import annotations

import inspect
import json
import threading
import types
import typing
from typing import Any

from polyrl.envs.hub_episode import import_object
from polyrl.errors import UserError

CAPACITY_ADVICE = (
    "polyrl opens one session per episode it plays at once (rl.prompts_per_step × rl.group_size in training; the "
    "held-out problems of a task in evaluation): start the server with max_concurrent_envs at least that"
)


class ActionRejected(Exception):
    """The environment refused an action as invalid: the policy's mistake (a tool error), not the environment's."""


def _openenv():
    try:
        import openenv.core as core
    except ImportError:
        raise UserError("env/openenv needs the openenv package: bash scripts/setup.sh installs it") from None
    return core


def _wire(observation) -> dict[str, Any]:
    """An Observation as the server sends it (JSON values: enums as their values)."""
    fields = observation.model_dump(mode="json", exclude={"reward", "done"})
    return {"observation": fields, "reward": observation.reward, "done": bool(observation.done)}


def _accepted(fn, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``fn`` takes (all of them when it takes ``**kwargs``): what an OpenEnv server passes."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def _action_classes(cls, action_base: type) -> list[type]:
    """The Action classes ``cls`` declares: ``Environment[MyAction, ...]``, else ``step``'s annotation."""
    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            args = typing.get_args(base)
            if args and isinstance(args[0], type) and issubclass(args[0], action_base):
                return [args[0]]
    try:
        hint = typing.get_type_hints(cls.step).get("action")
    except Exception:  # an annotation that does not resolve
        hint = None
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return [t for t in options if isinstance(t, type)]


class LocalSource:
    """An ``Environment`` subclass run in this process."""

    def __init__(self, path: str, name: str):
        core = _openenv()
        from openenv.core.env_server import CallToolAction, ListToolsAction, MCPEnvironment
        from openenv.core.env_server.types import Action

        cls = import_object(path, name)
        if not (isinstance(cls, type) and issubclass(cls, core.Environment)):
            raise UserError(f"{name}: {path} is not an OpenEnv Environment subclass (openenv.core.Environment)")
        self.name, self.cls = name, cls
        classes = _action_classes(cls, Action)
        mcp_types = (Action, ListToolsAction, CallToolAction)
        self.mcp = (MCPEnvironment is not None and issubclass(cls, MCPEnvironment)) or any(
            c in mcp_types for c in classes
        )
        if not self.mcp and (len(classes) != 1 or not issubclass(classes[0], Action)):
            raise UserError(
                f"{name}: cannot tell {cls.__name__}'s Action class: declare it as "
                "Environment[MyAction, MyObservation, State] or annotate step(self, action: MyAction)"
            )
        self.action_cls = CallToolAction if self.mcp else classes[0]
        self.action_schema = self.action_cls.model_json_schema()
        self.lock = None if getattr(cls, "SUPPORTS_CONCURRENT_SESSIONS", False) else threading.Lock()
        probe = self._construct()
        try:
            self.splits = _task_splits(probe, name)
        finally:
            probe.close()

    def _construct(self):
        try:
            return self.cls()
        except Exception as exc:
            raise UserError(
                f"{self.name}: cannot construct {self.cls.__name__}() ({type(exc).__name__}: {exc})"
            ) from None

    def open(self) -> LocalSession:
        return LocalSession(self)


def _task_splits(env, name: str) -> dict[str, int] | None:
    """A TaskProvider's splits and their task counts, or None for an environment without one."""
    if not callable(getattr(env, "list_splits", None)) or not callable(getattr(env, "num_tasks", None)):
        return None
    try:
        splits = [
            s if isinstance(s, str) else (s.get("name") if isinstance(s, dict) else str(s)) for s in env.list_splits()
        ]
        return {s: int(env.num_tasks(s)) for s in splits}
    except NotImplementedError:
        return None
    except Exception as exc:
        raise UserError(f"{name}: its task API failed ({type(exc).__name__}: {exc})") from None


class LocalSession:
    """One instance of the class: one episode."""

    def __init__(self, source: LocalSource):
        self.source = source
        self.env = None
        self.terms: dict[str, float] = {}
        """The episode's rubric scores so far, per named part (summed over steps)."""

    def _call(self, fn, *args, **kwargs):
        if self.source.lock is None:
            return fn(*args, **kwargs)
        with self.source.lock:
            return fn(*args, **kwargs)

    def reset(self, **kwargs) -> dict[str, Any]:
        self.env = self._call(self.source.cls)
        rubric = getattr(self.env, "rubric", None)
        for part, child in rubric.named_rubrics() if rubric is not None else ():
            child.register_forward_hook(lambda _r, _a, _o, score, part=part: self._record(part, score))
        return _wire(self._call(self.env.reset, **_accepted(self.env.reset, kwargs)))

    def _record(self, part: str, score: Any) -> None:
        if isinstance(score, (int, float)):
            self.terms[part] = self.terms.get(part, 0.0) + float(score)

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        from openenv.core.env_server.serialization import deserialize_action
        from pydantic import ValidationError

        try:
            typed = deserialize_action(action, self.source.action_cls)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ActionRejected(f"{'.'.join(map(str, first['loc'])) or 'action'}: {first['msg']}") from None
        return _wire(self._call(self.env.step, typed))

    def close(self) -> None:
        if self.env is not None:
            env, self.env = self.env, None
            self._call(env.close)


class RemoteSource:
    """An OpenEnv server at ``url``: its schema and task API read over HTTP when the task is made."""

    def __init__(self, url: str, name: str, timeout_s: float):
        _openenv()
        url = url.rstrip("/")
        for ws, http in (("ws://", "http://"), ("wss://", "https://")):  # its HTTP routes; the client speaks ws
            url = http + url[len(ws) :] if url.startswith(ws) else url
        self.name, self.url, self.timeout_s = name, url, timeout_s
        schema = self._get("/schema")
        if not isinstance(schema, dict) or not isinstance(schema.get("action"), dict):
            raise UserError(f"{name}: {url} does not serve OpenEnv's /schema (is it an OpenEnv server?)")
        self.action_schema = schema["action"]
        self.mcp = False
        self.splits = self._task_splits()

    def _request(self, method: str, path: str, body: Any = None):
        import httpx

        try:
            response = httpx.request(method, self.url + path, json=body, timeout=min(self.timeout_s, 30.0))
        except httpx.HTTPError as exc:
            raise UserError(
                f"{self.name}: no OpenEnv server answers at {self.url} ({type(exc).__name__}: {exc})"
            ) from None
        return response

    def _get(self, path: str) -> Any:
        response = self._request("GET", path)
        if response.status_code != 200:
            return None
        try:
            return response.json()
        except json.JSONDecodeError:
            return None

    def _task_splits(self) -> dict[str, int] | None:
        names = self._get("/list_environments")
        if not isinstance(names, list) or not names:
            return None
        env = names[0]
        splits = self._get(f"/{env}/splits")  # 501 without a TaskProvider
        if not isinstance(splits, list):
            return None
        counts = {}
        for split in splits:
            split_name = split.get("name") if isinstance(split, dict) else str(split)
            response = self._request("POST", f"/{env}/num_tasks", {"split": split_name})
            if response.status_code != 200:
                return None
            counts[split_name] = int(response.json()["num_tasks"])
        return counts

    def open(self) -> RemoteSession:
        return RemoteSession(self)


class RemoteSession:
    """One WebSocket session of the server: one episode."""

    def __init__(self, source: RemoteSource):
        self.source = source
        self.client = None
        self.broken = False
        self.closed = False
        self.terms: dict[str, float] = {}  # a server does not expose its rubric
        self.lock = threading.Lock()

    def reset(self, **kwargs) -> dict[str, Any]:
        core = _openenv()
        source = self.source
        with self.lock:
            if self.closed:  # closed by a failed rollout while this reset waited
                raise RuntimeError("session closed")
            self.client = core.GenericEnvClient(
                base_url=source.url, connect_timeout_s=source.timeout_s, message_timeout_s=source.timeout_s
            ).sync()
        try:
            self.client.connect()
            return _result(self.client.reset(**kwargs))
        except RuntimeError as exc:
            self.broken = True
            if "CAPACITY_REACHED" in str(exc):
                raise UserError(f"{source.name}: the server refused a session ({exc}); {CAPACITY_ADVICE}") from None
            raise UserError(f"{source.name}: the server failed to reset an episode ({exc})") from None
        except Exception as exc:
            self.broken = True
            raise UserError(
                f"{source.name}: cannot open a session on {source.url} ({type(exc).__name__}: {exc})"
            ) from None

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        try:
            return _result(self.client.step(action))
        except RuntimeError as exc:
            if "VALIDATION_ERROR" in str(exc):
                raise ActionRejected("the server rejected the action as invalid") from None
            self.broken = True
            raise
        except BaseException:
            self.broken = True  # dead, stalled past the timeout, or the connection dropped
            raise

    def close(self) -> None:
        with self.lock:
            client, self.client, self.closed = self.client, None, True
        if client is None:
            return
        if self.broken:  # closing waits out the socket's close handshake (10 s) with a stalled server: not here
            threading.Thread(target=_close_quietly, args=(client,), daemon=True, name="polyrl-openenv-close").start()
        else:
            _close_quietly(client)


def _close_quietly(client) -> None:
    try:
        client.close()
    except Exception:  # the server is gone: its session went with it
        pass


def _result(step_result) -> dict[str, Any]:
    return {
        "observation": step_result.observation or {},
        "reward": step_result.reward,
        "done": bool(step_result.done),
    }
