"""Multi-process training on ``torch.distributed`` with FSDP2 (``fully_shard``), launched by ``torchrun``.

Every rank holds a shard of the policy's parameters and of the optimizer state. The data path stays the
one-process path (docs/architecture.md): every rank draws the same problems from the same per-step seeds,
generates and scores only its slice of the groups (``group i`` on ``rank i % world``), and gathers the
others' groups, so that every rank sees the whole step's batch and computes the same advantages, task
statistics and loss normalizers as one process would. In the update each rank runs forward/backward on its
rows of each minibatch only; FSDP sums the gradients (divide factor 1: the loss is already normalized by
the global totals).

FSDP's collectives (the all-gather before each layer's forward, the reduce-scatter after its backward)
need every rank to run the same number of passes: :meth:`DistributedRanks.lockstep` pads a rank's list of
micro-batches to the longest rank's, and the padding runs an idle pass (zero loss) on one row
(``polyrl.learner.ranks.idle_pass``). :class:`DistributedRanks` is the learner's ``Ranks`` across processes; the
learner is the same code in one process (``polyrl.learner.ranks.ONE_PROCESS``).

Generation uses an unsharded replica of the policy on every rank (``sync_replica`` after each update), so
sampling needs no collective and ranks may generate different numbers of tokens.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from polyrl.errors import UserError
from polyrl.forward.decoder import IMAGE_MODEL_TYPE


def launched_by_torchrun() -> bool:
    """True in a process that ``torchrun`` started (it sets ``LOCAL_RANK`` and ``WORLD_SIZE``)."""
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def init_process_group(device: torch.device) -> DistributedRanks:
    """Join the process group ``torchrun`` describes in the environment, for a model on ``device`` (this rank's
    own, resolved by the caller): gloo on CPU; on CUDA, nccl for the model's tensors and gloo for the small CPU
    ones (counts, losses, per-row statistics)."""
    import torch.distributed as dist

    if not dist.is_available():
        raise UserError("this torch build has no torch.distributed: multi-process training is unavailable")
    if not dist.is_initialized():
        backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend)
    return DistributedRanks(dist.get_rank(), dist.get_world_size())


def unwrapped(model):
    """The transformers model inside a PEFT model (``model`` itself when it has no adapters)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_layers(model) -> list[torch.nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (``model.model.layers`` for Llama, Qwen, Mistral…),
    PEFT-wrapped too."""
    base = getattr(unwrapped(model), "model", None)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise UserError(f"FSDP: cannot find the decoder layers of {type(model).__name__} (expected model.layers)")
    return list(layers)


def shard_model(model, trainable: bool = True):
    """``fully_shard`` each decoder layer, then the root (embeddings, final norm, LM head), in place.

    Under LoRA the root is the transformers model inside the PEFT wrapper: the frozen base weights are sharded with
    the adapters that live in its layers, and only the adapters get gradients (FSDP2 reduces the gradients of
    parameters that require them). Gradients are summed over ranks, not averaged: each rank's loss is already
    divided by the global minibatch totals, so the sum is the one-process gradient."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    for layer in decoder_layers(model):
        fully_shard(layer)
    # the tiny VLM's patch encoder stays in the root unit: gathered by every forward on every rank, whether or not
    # its micro-batch has pictures (a unit of its own would all-gather only on the ranks that show one, and hang)
    fully_shard(unwrapped(model))
    if trainable and getattr(unwrapped(model).config, "model_type", None) == IMAGE_MODEL_TYPE:
        _pictures_in_lockstep(unwrapped(model))
    if trainable:
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)  # a plain SUM (gloo has no pre-multiplied sum)
    return model


def _pictures_in_lockstep(model) -> None:
    """Keep the reduce-scatters of the tiny VLM's ranks the same whether or not a rank's pass shows a picture.

    A pass without pictures (an idle pass, text rows) leaves the encoder without gradients on its rank: its unit
    reduce-scatters zeros for them, so that every rank reduces the same tensors. Under LoRA the embeddings are frozen
    and only the encoder's adapters make the first layer's input need a gradient, which decides whether that layer's
    reduce-scatter runs during the backward or at its end: the input is made to need one always, so that every rank
    reduces its units in the same order."""
    model.set_reduce_scatter_unused_params(True)
    if not model.get_input_embeddings().weight.requires_grad:
        model.enable_input_require_grads()


def sync_replica(sharded, replica) -> None:
    """Copy the sharded model's full weights into the unsharded ``replica`` (a collective: every rank calls it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(sharded, options=StateDictOptions(full_state_dict=True))
    with torch.no_grad():
        replica.load_state_dict(full, strict=False)


def save_sharded(path: Path, model, optimizer) -> None:
    """The sharded model and optimizer state with ``torch.distributed.checkpoint`` (each rank writes its shard)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(path))


def load_sharded(path: Path, model, optimizer) -> None:
    """Load what :func:`save_sharded` wrote into ``model`` and ``optimizer`` (any world size DCP can reshard)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


def stage_directory(path: Path, ranks: DistributedRanks) -> None:
    """An empty ``path`` for every rank to write into (rank 0 clears it; everyone waits)."""
    if ranks.rank == 0:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    ranks.barrier()


@dataclass(frozen=True)
class DistributedRanks:
    """This process's place in the ``torch.distributed`` group, and the collectives the trainer and learner need
    (``polyrl.learner.ranks.Ranks`` across processes)."""

    rank: int
    world: int
    sharded: bool = True
    """The policy is sharded across the group (FSDP2)."""

    @property
    def is_writer(self) -> bool:
        """Rank 0 writes the run directory; the others write nothing."""
        return self.rank == 0

    def mine(self, rows: Tensor) -> Tensor:
        """This rank's share of ``rows`` (every ``world``-th, starting at ``rank``)."""
        return rows[self.rank :: self.world]

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def gather(self, obj) -> list:
        """Every rank's ``obj`` (picklable, small: trajectories, statistics), in rank order."""
        import torch.distributed as dist

        out: list = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj):
        """Rank 0's ``obj`` on every rank."""
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def sum(self, value: float) -> float:
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t[0])

    def lockstep(self, pieces: Iterable[Tensor]) -> list[Tensor | None]:
        """``pieces`` padded with None to the longest rank's count, so that every rank runs as many passes."""
        import torch.distributed as dist

        pieces = list(pieces)
        count = torch.tensor([len(pieces)])
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        return pieces + [None] * (int(count) - len(pieces))

    def sum_rows(self, values: Tensor) -> Tensor:
        """Per-row values each rank filled for its own rows (0 elsewhere), summed into the whole on every rank."""
        import torch.distributed as dist

        out = values.clone()
        dist.all_reduce(out)
        return out

    def merge_rows(self, values: Tensor) -> Tensor:
        """Per-row values each rank filled for its own rows (NaN elsewhere), combined on every rank."""
        filled = ~torch.isnan(values)
        merged = self.sum_rows(torch.where(filled, values, torch.zeros_like(values)))
        count = self.sum_rows(filled.to(values.dtype))
        return torch.where(count > 0, merged, torch.full_like(merged, float("nan")))


class RankSource:
    """A :class:`~polyrl.rollout.collect.GroupSource` that splits each round's groups across ranks.

    Every rank draws the same problems (same step seeds); rank ``r`` generates groups ``r, r + world, …``
    with ``inner`` (the in-process source, on the unsharded replica), each under its own seed, and every
    rank receives every group in problem order. Per-group seeds make the sampled completions independent
    of how the groups are split, so a run on 2 ranks samples what a run on 1 rank samples; generation runs
    on a forked RNG, so the ranks' global RNGs (minibatch shuffles) stay in step."""

    def __init__(self, inner, ranks: DistributedRanks):
        self.inner, self.ranks = inner, ranks

    def groups(self, n: int, make_problems) -> list:
        problems = make_problems(n)
        base = int(torch.randint(2**62, (1,)))  # the same draw on every rank
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        mine = []
        with torch.random.fork_rng(devices=devices):
            for k in range(self.ranks.rank, len(problems), self.ranks.world):
                torch.manual_seed((base + k) % 2**63)
                mine.append(self.inner.groups(1, lambda _n, p=problems[k]: [p]))
        by_rank = self.ranks.gather(mine)
        return [group for k in range(len(problems)) for group in by_rank[k % self.ranks.world][k // self.ranks.world]]

    def stats(self) -> dict[str, float]:
        return self.inner.stats()


class RankScorer:
    """The batched reward terms (reward model, judge, majority vote) across ranks: each rank scores the
    trajectories of its groups (``group % world == rank``: majority vote sees whole groups) and every rank
    receives every result, so each trajectory is scored once, not once per rank."""

    def __init__(self, scorer, ranks: DistributedRanks):
        self.scorer, self.ranks = scorer, ranks

    def score(self, trajs: list) -> None:
        if not self.scorer:  # no batched term in this run: nothing to split (the same on every rank)
            return
        mine = [i for i, t in enumerate(trajs) if t.group % self.ranks.world == self.ranks.rank]
        self.scorer.score([trajs[i] for i in mine])
        scored = {
            i: (t.reward, t.reward_terms, t.reward_failures, t.judge_position_inconsistent)
            for i in mine
            for t in [trajs[i]]
        }
        for part in self.ranks.gather(scored):
            for i, (reward, terms, failures, inconsistent) in part.items():
                t = trajs[i]
                t.reward, t.reward_terms, t.reward_failures = reward, terms, failures
                t.judge_position_inconsistent = inconsistent
