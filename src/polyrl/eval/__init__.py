"""Held-out evaluation: accuracy, pass@k."""

from polyrl.eval.heldout import evaluate_policy, format_comparison
from polyrl.eval.pass_at_k import pass_at_k

__all__ = ["evaluate_policy", "format_comparison", "pass_at_k"]
