"""Policies: model + tokenizer loading, the embedded tiny default, prompts and generation backends."""

from polyrl.policy.generation import Generation, GenerationBackend, TransformersBackend
from polyrl.policy.loading import Policy, load_policy
from polyrl.policy.prompts import PromptBuilder
from polyrl.policy.tiny import TinyModelConfig, build_tiny_policy

__all__ = [
    "Generation",
    "GenerationBackend",
    "Policy",
    "PromptBuilder",
    "TinyModelConfig",
    "TransformersBackend",
    "build_tiny_policy",
    "load_policy",
]
