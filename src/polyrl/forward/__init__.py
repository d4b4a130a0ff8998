"""The forward: what turns tokens into log-probs, below the policy and the learner alike.

- ``batch.py``: :class:`TokenBatch` (padded tokens, made on the host, moved with one ``.to(device)``), ``collate``,
  micro-batches of a token budget, and the distinct prompts rows share;
- ``decoder.py``: polyrl's forward of Llama-family decoders over packed tokens, and the packed layout of a batch;
- ``prefill.py``: distinct prompts through a model's own forward with its KV cache (other architectures);
- ``token_scores.py``: a chosen token's log-prob and the entropy, from logits, and from hidden states through
  ``lm_head`` a chunk of positions at a time;
- ``logprobs.py``: :func:`sequence_logprobs`, every scoring pass of a model (packed, shared-prompt or padded);
- ``precision.py``: the autocast and activation-checkpointing switches a model carries into every forward.

Generation (``policy/generation.py``), the learner, the harness and the Ray workers all score tokens here. Every
function takes the device from its caller's batch and none asks the weights where they are.
"""

from polyrl.forward.batch import TokenBatch, collate
from polyrl.forward.logprobs import sequence_logprobs
from polyrl.forward.token_scores import chosen_logprobs, entropy_from_logits, token_logprobs

__all__ = ["TokenBatch", "chosen_logprobs", "collate", "entropy_from_logits", "sequence_logprobs", "token_logprobs"]
