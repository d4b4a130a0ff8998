"""The learner: everything between a step's trajectories and ``optimizer.step()``.

- ``batch.py``: :class:`TokenBatch` (padded tokens, made on the host, moved with one ``.to(device)``) and ``collate``;
- ``forward.py``: :func:`sequence_logprobs`, the one training forward (packed, shared-prompt or padded);
- ``packed.py`` and ``token_scores.py``: the packed layout, and log-probs from hidden states in chunks;
- ``update_batch.py``: advantages and the rows to train on (:class:`UpdateBatch`, :func:`prepare_update`);
- ``update.py``: the policy update (:func:`policy_update`) and the critic's (:func:`critic_update`); ``statistics.py``:
  the objective's statistics, read off the device once per micro-batch;
- ``sft.py``: the supervised step (:func:`sft_step`), for one process and for FSDP ranks alike;
- ``settings.py``: the frozen :class:`UpdateSettings` built once from the config.

Every function here takes the device it works on from its caller (the run's placement, ``train/placement.py``)
and none asks the weights where they are.
"""

from polyrl.learner.batch import TokenBatch, collate
from polyrl.learner.forward import sequence_logprobs
from polyrl.learner.settings import UpdateSettings
from polyrl.learner.sft import SFT_MAX_GRAD_NORM, SFT_WEIGHT_DECAY, sft_step
from polyrl.learner.update import BaseModelReference, UpdateResult, critic_update, policy_update
from polyrl.learner.update_batch import UpdateBatch, prepare_update

__all__ = [
    "SFT_MAX_GRAD_NORM",
    "SFT_WEIGHT_DECAY",
    "BaseModelReference",
    "TokenBatch",
    "UpdateBatch",
    "UpdateResult",
    "UpdateSettings",
    "collate",
    "critic_update",
    "policy_update",
    "prepare_update",
    "sequence_logprobs",
    "sft_step",
]
