"""Log-probs and entropy of chosen tokens from logits (``forward/token_scores.py``) against hand-computed numbers."""

import math

import pytest
import torch

from polyrl import UserError
from polyrl.forward import entropy_from_logits, token_logprobs

LN2 = math.log(2.0)


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def test_token_logprobs_match_log_softmax_gather():
    torch.manual_seed(0)
    logits, tokens = torch.randn(2, 3, 11), torch.randint(0, 11, (2, 3))
    expected = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    close(token_logprobs(logits, tokens, 1.0), expected)


def test_token_logprobs_do_not_depend_on_chunk_size():
    torch.manual_seed(0)
    logits, tokens = torch.randn(3, 5, 7), torch.randint(0, 7, (3, 5))
    close(token_logprobs(logits, tokens, 1.0, chunk_rows=1), token_logprobs(logits, tokens, 1.0, chunk_rows=4))


def test_token_logprobs_divide_logits_by_temperature():
    logits, tokens = torch.tensor([[[0.0, 2.0]]]), torch.tensor([[1]])
    # softmax([0, 1])[1] = e / (1 + e)
    close(token_logprobs(logits, tokens, temperature=2.0), [[1 - math.log(1 + math.e)]])


def test_token_logprobs_upcast_bf16_and_pass_gradients():
    torch.manual_seed(0)
    logits = torch.randn(1, 2, 5, dtype=torch.float64, requires_grad=True)
    tokens = torch.tensor([[0, 3]])
    assert token_logprobs(logits.bfloat16(), tokens, 1.0).dtype == torch.float32
    assert torch.autograd.gradcheck(lambda z: token_logprobs(z, tokens, 1.0, chunk_rows=1), (logits,))


def test_nonpositive_temperature_is_a_user_error():
    with pytest.raises(UserError, match="temperature"):
        token_logprobs(torch.zeros(1, 1, 2), torch.zeros(1, 1, dtype=torch.long), temperature=0.0)


def test_entropy_of_uniform_logits_is_log_vocab_size():
    close(entropy_from_logits(torch.zeros(2, 3, 8), 1.0), torch.full((2, 3), math.log(8)))


def test_entropy_matches_definition():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6)
    log_p = torch.log_softmax(logits, -1)
    close(entropy_from_logits(logits, 1.0, chunk_rows=3), -(log_p.exp() * log_p).sum(-1))


def test_entropy_ignores_masked_out_tokens():
    logits = torch.tensor([[[0.0, 0.0, -math.inf, -math.inf]]])
    close(entropy_from_logits(logits, 1.0), [[LN2]])
