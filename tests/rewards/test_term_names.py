"""A reward term's name has one home, the registration that defines it (``@rule_term`` in rewards/rules.py, the
built-in batched terms in rewards/builtin_terms.py); the lists the config and the scorer read are derived from
those registrations, and each name is also its weight's ``RewardConfig`` field (default and description)."""

import ast
from pathlib import Path

from polyrl.rewards import MODEL_TERMS, REWARD_SOURCES, RULE_TERMS, RewardConfig
from polyrl.rewards.rules import RULES

REWARDS = Path(__file__).parents[2] / "src" / "polyrl" / "rewards"
WEIGHTS = {
    name
    for name, field in RewardConfig.model_fields.items()
    if field.annotation is float and "weight" in (field.description or "").lower()
}


def test_every_built_in_term_is_weighted_by_the_config_field_of_its_name_and_every_weight_is_a_term():
    assert set(RULE_TERMS) | set(MODEL_TERMS) == WEIGHTS
    assert {rule.weight for rule in RULES.values()} <= WEIGHTS  # env_return is weighted as verifier


def test_the_lists_are_the_registrations_in_the_order_terms_are_summed_and_scored():
    assert RULE_TERMS == ("verifier", "format", "length", "overlong", "think_format", "think_length")
    assert MODEL_TERMS == ("reward_model", "judge", "majority_vote")
    assert set(MODEL_TERMS) <= set(REWARD_SOURCES.names())


def test_no_module_restates_the_term_names_in_a_literal_list():
    """The three homes issue #41 found (rules.py decorators, terms.py tuples, RewardConfig fields) are one: no
    tuple or list literal of two or more term names is written anywhere in rewards/."""
    names = set(RULE_TERMS) | set(MODEL_TERMS)
    restated = []
    for path in REWARDS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if len(words & names) >= 2:
                    restated.append(f"{path.name}:{node.lineno}")
    assert restated == []
