"""vLLM generation backend (optional extra ``polyrl[vllm]``, CUDA only), with in-place weight sync.

The trainer keeps its transformers model for the update; vLLM holds a second copy of the weights for
sampling. ``sync_weights`` copies the trainer's current tensors into vLLM's model (``load_weights`` with
Hugging Face parameter names) and clears vLLM's prefix cache, so the next ``generate`` samples from the
updated policy. Nothing here imports vLLM at module import time: ``import polyrl`` works without it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from polyrl.errors import UserError
from polyrl.forward.logprobs import DEFAULT_TEMPERATURE
from polyrl.policy.backends import BackendContext, GenerationConfig, register_backend
from polyrl.policy.generation import DEFAULT_TOP_P, Generation, eos_ids
from polyrl.policy.loading import Policy, merged


def require_vllm():
    try:
        import vllm
    except ImportError:
        raise UserError(
            "generation.engine: vllm needs vLLM: pip install 'polyrl[vllm]' (Linux with a CUDA GPU)"
        ) from None
    return vllm


def hf_named_weights(model) -> Iterable[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` pairs with plain Hugging Face names: LoRA adapters are merged into a copy first."""
    for name, tensor in merged(model).state_dict().items():
        yield name, tensor.detach()


def _in_process_model(llm) -> Any | None:
    """vLLM's torch model when the engine runs in this process (the attribute path moved between versions)."""
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    worker = getattr(executor, "driver_worker", None)
    for runner_owner in (worker, getattr(worker, "worker", None)):
        model = getattr(getattr(runner_owner, "model_runner", None), "model", None)
        if model is not None and hasattr(model, "load_weights"):
            return model
    return None


def _load_weights_on_worker(worker, weights: list[tuple[str, torch.Tensor]]) -> int:
    """Runs inside each vLLM worker (``LLM.collective_rpc``): load HF-named tensors into its model."""
    worker.model_runner.model.load_weights(weights=weights)
    return len(weights)


def load_weights(llm, weights: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Copy ``weights`` into ``llm``'s model; returns how many tensors were sent."""
    model = _in_process_model(llm)
    weights = [(name, tensor) for name, tensor in weights]
    if model is not None:
        model.load_weights(weights)
    elif hasattr(llm, "collective_rpc"):  # engine in another process: ship the tensors to every worker
        llm.collective_rpc(_load_weights_on_worker, args=([(n, t.cpu()) for n, t in weights],))
    else:
        raise RuntimeError("this vLLM version exposes neither its model nor collective_rpc: weights can't be synced")
    return len(weights)


class VLLMBackend:
    """Generation with vLLM from the trainer's current weights.

    vLLM loads a model from a directory, so the policy is saved once to ``work_dir`` (a temporary directory
    by default) when the backend starts; after that, weights move in memory. Each completion gets its own
    sampling seed drawn from torch's generator, so runs are reproducible for a fixed trainer seed and the G
    completions of a group differ. Identical prompts share their prefill through vLLM's prefix cache.
    The engine keywords have no defaults here: :func:`engine_options` reads them from the ``generation`` section.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        gpu_memory_utilization: float,
        max_model_len: int | None,
        enforce_eager: bool,
        dtype: str,
        seed: int,
        work_dir: str | None = None,
    ):
        vllm = require_vllm()
        if not torch.cuda.is_available():
            raise UserError(
                "generation.engine: vllm needs a CUDA GPU; use generation.engine=transformers on this machine"
            )
        self.tokenizer = tokenizer
        self.version = 0
        self._eos = eos_ids(model, tokenizer)
        self._tmp = None
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="polyrl-vllm-")
            work_dir = self._tmp.name
        path = Path(work_dir)
        Policy(model, tokenizer).save(path, adapter=False)
        # an in-process engine lets sync_weights write into vLLM's tensors directly
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self.llm = vllm.LLM(
            model=str(path),
            tokenizer=str(path),
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            dtype=dtype,
            seed=seed,
            enable_prefix_caching=True,
        )
        self._sampling_params = vllm.SamplingParams

    def sync_weights(self, model, version: int) -> None:
        load_weights(self.llm, hf_named_weights(model))
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights
        self.version = version

    def generate(
        self, prompts, *, max_new_tokens, temperature=DEFAULT_TEMPERATURE, top_p=DEFAULT_TOP_P, greedy=False
    ) -> list[Generation]:
        if not prompts:
            return []
        seeds = torch.randint(0, 2**31 - 1, (len(prompts),)).tolist()
        params = [
            self._sampling_params(
                n=1,
                max_tokens=max_new_tokens,
                temperature=0.0 if greedy else temperature,
                top_p=1.0 if greedy else top_p,
                stop_token_ids=list(self._eos),
                seed=seed,
                skip_special_tokens=True,
            )
            for seed in seeds
        ]
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompts], sampling_params=params, use_tqdm=False
        )
        gens = []
        for prompt, out in zip(prompts, outputs):
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            finished = sample.finish_reason == "stop"
            # vLLM leaves a stop token out of token_ids in some versions: the trainer needs it (it is trained on)
            if finished and (not ids or ids[-1] not in self._eos) and sample.stop_reason in self._eos:
                ids.append(sample.stop_reason)
            finished = finished and bool(ids) and ids[-1] in self._eos
            gens.append(Generation(list(prompt), ids, self.tokenizer.decode(ids, skip_special_tokens=True), finished))
        return gens

    def close(self) -> None:
        self.llm = None
        if self._tmp is not None:
            self._tmp.cleanup()


@register_backend("vllm", cuda_only=True, check=require_vllm)
def make_vllm_backend(model, tokenizer, ctx: BackendContext) -> VLLMBackend:
    """``generation.engine: vllm``: the ``generation.vllm_*`` fields, the run seed."""
    return VLLMBackend(model, tokenizer, **engine_options(ctx.generation), seed=ctx.seed)


def engine_options(generation: GenerationConfig) -> dict[str, Any]:
    """:class:`VLLMBackend`'s engine keywords from the ``generation`` section (their one home: its ``vllm_*``
    fields)."""
    return {
        "gpu_memory_utilization": generation.vllm_gpu_memory_utilization,
        "max_model_len": generation.vllm_max_model_len,
        "enforce_eager": generation.vllm_enforce_eager,
        "dtype": generation.vllm_dtype,
    }
