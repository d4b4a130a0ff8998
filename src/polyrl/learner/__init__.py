"""The learner: everything between a step's trajectories and ``optimizer.step()``.

- ``update_batch.py``: advantages and the rows to train on (:class:`UpdateBatch`, :func:`prepare_update`);
- ``update.py``: the policy update (:func:`policy_update`; the objective's statistics are read off the device once
  per micro-batch, ``algos/objective_stats.py``) and the critic's (:func:`critic_update`);
- ``sft.py``: the supervised step (:func:`sft_step`), for one process and for FSDP ranks alike;
- ``ranks.py``: the processes the work is split across (:class:`Ranks`: :data:`ONE_PROCESS`, whose collectives hand
  their input back, or FSDP's ranks), and the idle pass that keeps sharded ranks in step;
- ``settings.py``: the frozen :class:`UpdateSettings` built once from the config.

The forward it takes of a model (``sequence_logprobs``, on a ``TokenBatch``) is :mod:`polyrl.forward`'s. Every function
here takes the device it works on from its caller (the run's placement, ``train/placement.py``) and none asks the
weights where they are.
"""

from polyrl.learner.ranks import ONE_PROCESS, OneProcess, Ranks
from polyrl.learner.settings import UpdateSettings
from polyrl.learner.sft_step import SFT_MAX_GRAD_NORM, SFT_WEIGHT_DECAY, sft_step
from polyrl.learner.update import BaseModelReference, UpdateResult, critic_update, policy_update
from polyrl.learner.update_batch import UpdateBatch, prepare_update

__all__ = [
    "ONE_PROCESS",
    "SFT_MAX_GRAD_NORM",
    "SFT_WEIGHT_DECAY",
    "BaseModelReference",
    "OneProcess",
    "Ranks",
    "UpdateBatch",
    "UpdateResult",
    "UpdateSettings",
    "critic_update",
    "policy_update",
    "prepare_update",
    "sft_step",
]
