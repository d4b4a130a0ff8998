"""Ray actors: rollout workers that hold a policy copy, and environment workers that run episode steps.

A rollout worker plays one group (one problem, G completions or episodes) per request, at the policy
version the request names, and returns scored :class:`Trajectory` objects whose ``info`` carries the
behaviour log-probs of every response token (a forward pass at the sampling temperature). Requests run
in threads (``rollout_concurrency``), so while one group waits on a slow environment, others generate;
within a group the episodes' environment steps run concurrently too. In asynchronous mode generation is
interruptible: the trainer sends each new version's weights to every worker, and a running episode
generates its next turn with them (partial rollouts; the behaviour log-probs are each turn's own).
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections import OrderedDict
from typing import Any

import torch

from polyrl.device import HOST
from polyrl.envs.environment import Environment, EnvTask, StepResult, is_environment
from polyrl.tasks import Problem


class EnvWorker:
    """Holds live environments by id and runs their ``reset``/``step`` away from generation."""

    def __init__(self):
        self.envs: dict[str, Environment] = {}
        self.started = self.steps = 0
        self.lock = threading.Lock()  # a threaded actor (env_worker_concurrency > 1) steps several at once

    def start(self, task: EnvTask, problem: Problem) -> tuple[str, list, list]:
        env = task.make_env(problem)
        key = uuid.uuid4().hex
        with self.lock:
            self.envs[key] = env
            self.started += 1
        return key, env.reset(), list(env.tools)

    def step(self, key: str, action: str) -> tuple[StepResult, dict]:
        env = self.envs[key]
        with self.lock:
            self.steps += 1
        return env.step(action), dict(env.stats)

    def close(self, key: str) -> None:
        env = self.envs.pop(key, None)
        if env is not None:
            env.close()

    def counts(self) -> dict[str, int]:
        """Episodes started and steps run here; environments still open."""
        return {"started": self.started, "steps": self.steps, "open": len(self.envs)}

    def ping(self) -> bool:
        return True


class RemoteEnvironment(Environment):
    """An episode whose environment lives in an :class:`EnvWorker`; a dead worker ends it with env_error
    (the rollout catches the raised error), so no episode disappears."""

    def __init__(self, task: EnvTask, problem: Problem, worker):
        super().__init__(problem, task.max_turns)
        self.task, self.worker, self.key = task, worker, None

    def reset(self):
        import ray

        self.key, messages, self.tools = ray.get(self.worker.start.remote(self.task, self.problem))
        return messages

    def step(self, action: str) -> StepResult:
        import ray

        result, self.stats = ray.get(self.worker.step.remote(self.key, action))
        return result

    def close(self) -> None:
        if self.key is not None:
            self.worker.close.remote(self.key)  # fire and forget: a dead worker has nothing left to close


class RemoteEnvTask:
    """Wraps an EnvTask so that ``make_env`` builds a :class:`RemoteEnvironment` on one of ``workers``."""

    def __init__(self, task: EnvTask, workers: list):
        self.task, self.workers = task, workers
        self._next = 0
        self._lock = threading.Lock()

    def make_env(self, problem: Problem) -> Environment:
        with self._lock:
            worker = self.workers[self._next % len(self.workers)]
            self._next += 1
        return RemoteEnvironment(self.task, problem, worker)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)


def _response_logprobs(model, device, trajs, pad_id: int, temperature: float, top_p: float) -> list[list[float]]:
    from polyrl.forward import collate, sequence_logprobs

    batch = collate([(t.prompt_ids, t.response_ids) for t in trajs], pad_id).to(device)
    if top_p < 1.0:
        return _nucleus_response_logprobs(model, trajs, batch, temperature, top_p)
    with torch.no_grad():
        logp, _ = sequence_logprobs(model, batch, temperature)
    return [
        logp[i, len(t.prompt_ids) - 1 : len(t.prompt_ids) - 1 + len(t.response_ids)].tolist()
        for i, t in enumerate(trajs)
    ]


def _nucleus_response_logprobs(model, trajs, batch, temperature: float, top_p: float) -> list[list[float]]:
    """With ``rl.top_p < 1`` the tokens were drawn from the top-p nucleus, renormalized: score each response
    token under that distribution (full logits of one row at a time), not under the plain softmax. A Hugging Face
    vision-language model scores every row on its picture forward (the learner's); a row with pictures of any other
    model takes polyrl's packed forward, the only one that embeds them (the model's own forward refuses them)."""
    from polyrl.forward.decoder import picture_forward_of
    from polyrl.forward.precision import forward_precision
    from polyrl.policy.generation import nucleus_logprobs

    pictures = picture_forward_of(model)
    out = []
    with torch.no_grad(), forward_precision(model, batch.device):
        for i, t in enumerate(trajs):
            n, start = len(t.prompt_ids) + len(t.response_ids), len(t.prompt_ids) - 1
            if pictures is not None:
                logits, targets = _picture_response_logits(pictures, model, _row(batch, i), start, n)
            elif batch.images is not None and batch.images[i] is not None:
                logits, targets = _packed_response_logits(model, _row(batch, i))
            else:
                ids = batch.input_ids[i : i + 1, :n]
                logits = model(input_ids=ids, attention_mask=batch.attention_mask[i : i + 1, :n]).logits[0]
                logits, targets = logits[start : n - 1], ids[0, start + 1 : n]
            out.append(nucleus_logprobs(logits, targets, temperature, top_p).tolist())
    return out


def _row(batch, i: int):
    """Row ``i`` of ``batch`` as a one-row batch on its device."""
    return batch.on_host().select(torch.tensor([i])).to(batch.device)


def _picture_response_logits(pictures, model, row, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits that predict each response token of the one-row batch ``row`` (tokens ``start + 1 .. n - 1``),
    and those tokens, on a Hugging Face vision-language model's picture forward with the row's pictures."""
    from polyrl.forward.pictures import picture_hidden

    hidden = picture_hidden(pictures, model, row)[0, start : n - 1]
    head = (model.get_base_model() if hasattr(model, "get_base_model") else model).get_output_embeddings()
    return head(hidden), row.input_ids[0, start + 1 : n]


def _packed_response_logits(model, row) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits that predict each response token of the one-row batch ``row``, and those tokens, on the packed
    forward with the row's pictures."""
    from polyrl.forward.decoder import Decoder, pack, packed_hidden

    dec = Decoder.of(model)
    packed = pack(row, row.device, share_prompts=False)
    hidden = packed_hidden(dec, packed.ids, packed.positions, packed.blocks, images=packed.images)
    return dec.head(hidden[packed.predictors]), packed.targets


def behaviour_logprobs(models: dict, device, trajs, pad_id: int, temperature: float, top_p: float) -> None:
    """Store in ``t.behaviour_logprobs`` the log-prob of each response token under the weights and the
    distribution that sampled it: ``models[v]`` for the tokens of a turn generated at version ``v``
    (``t.turn_versions``; partial rollouts span versions), ``models[t.policy_version]`` elsewhere (environment
    tokens, single turns); with ``top_p < 1`` the top-p nucleus renormalized, as the sampler drew from it. Every
    model's weights are on ``device``."""
    if not trajs:
        return
    needed: dict[int, list[int]] = {}
    for i, t in enumerate(trajs):
        for v in {t.policy_version, *(t.turn_versions or ())}:
            needed.setdefault(v, []).append(i)
    per_version: dict[int, dict[int, list[float]]] = {}
    for v, rows in needed.items():
        logps = _response_logprobs(models[v], device, [trajs[i] for i in rows], pad_id, temperature, top_p)
        per_version[v] = dict(zip(rows, logps))
    for i, t in enumerate(trajs):
        out = list(per_version[t.policy_version][i])
        for (a, b), v in zip(t.turn_spans or (), t.turn_versions or ()):
            out[a:b] = per_version[v][i][a:b]
        t.behaviour_logprobs = out


class RolloutWorker:
    """A policy copy per recent version (kept by reference while a thread uses it) and generation."""

    def __init__(
        self,
        model_config,
        seed: int,
        prompt_config,
        tasks: dict,
        env_workers: list,
        keep_versions: int,
        threads: int | None = None,
        backend_options: dict | None = None,
    ):
        from polyrl.policy import PromptBuilder, load_policy

        torch.set_num_threads(threads or 1)
        self.policy = load_policy(model_config, seed=seed, device=HOST)  # a rollout actor holds CPUs only (pool.py)
        self.policy.model.eval()
        self.prompts = PromptBuilder(self.policy.tokenizer, prompt_config, self.policy.image_input)
        self.backend_options = dict(backend_options or {})
        """``TransformersBackend`` keywords (``batch_size``, ``shared_prefill``), as the trainer's backend has."""
        self.tasks = {
            n: RemoteEnvTask(t, env_workers) if env_workers and is_environment(t) else t for n, t in tasks.items()
        }
        self.keep_versions = keep_versions
        self.models: OrderedDict[int, Any] = OrderedDict()
        self.lock = threading.Lock()
        self.latest: tuple[int, list] = (-1, [])

    def set_latest(self, version: int, weights: list) -> None:
        """The trainer's newest weights (``[ObjectRef]``): interruptible rollouts switch to them at the next turn."""
        with self.lock:
            if version > self.latest[0]:
                self.latest = (version, weights)

    def _model(self, version: int, weights: list):
        with self.lock:
            if version not in self.models:
                import ray

                model = copy.deepcopy(self.policy.model)
                model.load_state_dict(ray.get(weights[0]))
                self.models[version] = model.eval()
                while len(self.models) > self.keep_versions:
                    self.models.popitem(last=False)  # a thread still using it holds its own reference
            return self.models[version]

    def rollout(
        self,
        problem: Problem,
        version: int,
        weights: list,
        sampling,
        interruptible: bool = False,
    ) -> list:
        """Play one group at policy ``version`` (``weights`` is ``[ObjectRef]`` of its state dict). With
        ``interruptible``, every turn (and a single-turn group when it starts) is generated by the newest
        weights this worker has been sent (:meth:`set_latest`), at least ``version``: partial rollouts.
        ``sampling`` is the trainer's :class:`~polyrl.rollout.dispatch.Sampling`; the group comes back unscored
        (the trainer's scoring stage verifies and rewards it)."""
        from polyrl.rollout import rollout

        models = {version: self._model(version, weights)}  # held by reference until the behaviour log-probs

        def latest():
            with self.lock:
                v, w = self.latest if self.latest[0] > version else (version, weights)
            if v not in models:
                models[v] = self._model(v, w)
            return self._backend(models[v]), v

        backend = self._backend(models[version])
        trajs = rollout(
            [problem],
            self.tasks,
            backend,
            self.prompts,
            sampling,
            version=version,
            latest=latest if interruptible else None,
        )
        pad_id = self.policy.tokenizer.pad_token_id
        behaviour_logprobs(models, self.policy.device, trajs, pad_id, sampling.temperature, sampling.top_p)
        return trajs

    def _backend(self, model):
        from polyrl.policy import TransformersBackend

        return TransformersBackend(model, self.policy.tokenizer, device=self.policy.device, **self.backend_options)

    def ping(self) -> bool:
        return True
