"""The processes the learner's work is split across: one, or the ranks of a sharded run, behind one protocol.

The update and the SFT step are written once, against :class:`Ranks`: each process trains its share of every
minibatch (:meth:`~Ranks.mine`), every process runs as many passes (:meth:`~Ranks.lockstep`, padded with
:func:`idle_pass`), and losses, per-row values and statistics are combined over the processes. In one process
(:data:`ONE_PROCESS`) every share is the whole and every collective hands its input back; across ranks the
implementation is ``polyrl.distributed.fsdp.DistributedRanks`` (``torch.distributed``, FSDP2).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor


class Ranks(Protocol):
    """This process's place among the processes that train one policy, and the collectives they share."""

    rank: int
    world: int

    @property
    def is_writer(self) -> bool:
        """Whether this process writes the run directory (rank 0; the others write nothing)."""
        ...

    @property
    def sharded(self) -> bool:
        """Whether the model is sharded across the processes: a sharded forward is a collective, so every process
        must run the same passes (none takes the shared-prompt path, whose passes depend on its rows)."""
        ...

    def mine(self, rows: Tensor) -> Tensor:
        """This process's share of ``rows``."""
        ...

    def lockstep(self, pieces: Iterable[Tensor]) -> list[Tensor | None]:
        """``pieces`` padded with None to the longest process's count, so that every process runs as many passes."""
        ...

    def sum(self, value: float) -> float:
        """``value`` summed over the processes."""
        ...

    def sum_rows(self, values: Tensor) -> Tensor:
        """Per-row values each process filled for its own rows (0 elsewhere), summed into the whole."""
        ...

    def merge_rows(self, values: Tensor) -> Tensor:
        """Per-row values each process filled for its own rows (NaN elsewhere), combined."""
        ...

    def gather(self, obj: Any) -> list:
        """Every process's ``obj`` (picklable, small), in rank order."""
        ...

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every process."""
        ...

    def barrier(self) -> None:
        """Wait until every process is here."""
        ...


@dataclass(frozen=True)
class OneProcess:
    """The one process of an unsharded run: its share is every row, and every collective hands its input back."""

    rank: int = 0
    world: int = 1
    is_writer: bool = True
    sharded: bool = False

    def mine(self, rows: Tensor) -> Tensor:
        return rows

    def lockstep(self, pieces: Iterable[Tensor]) -> list[Tensor | None]:
        return list(pieces)

    def sum(self, value: float) -> float:
        return value

    def sum_rows(self, values: Tensor) -> Tensor:
        return values

    def merge_rows(self, values: Tensor) -> Tensor:
        return values

    def gather(self, obj: Any) -> list:
        return [obj]

    def broadcast(self, obj: Any) -> Any:
        return obj

    def barrier(self) -> None:
        return None


ONE_PROCESS = OneProcess()
"""The ranks of a run in one process (``LocalPlacement.ranks``, and the learner's when none is given)."""


def idle_pass(model, input_ids: Tensor, device, backward: bool) -> None:
    """One forward (and backward) pass that contributes nothing: keeps this rank's FSDP collectives in step
    with a rank that has one more micro-batch. ``input_ids``: the batch's tokens (its first token is moved to
    ``device``, the model's, and run: never an image placeholder, which would need its picture)."""
    with torch.set_grad_enabled(backward):
        logits = model(input_ids=input_ids[:1, :1].to(device), use_cache=False).logits
        if backward:
            (logits.float().sum() * 0.0).backward()
