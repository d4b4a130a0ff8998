"""Every default has one home (issue #37): the config field, or, for a library-only default, one named constant.

A default written twice drifts: the copy in a signature silently wins wherever a caller forgets to pass the
config's value (``max_episode_tokens=384`` did). The finder (``tests/default_homes.py``) looks over
``src/polyrl``; its tables ``ALIASES``, ``HOMONYMS`` and ``INDEPENDENT`` hold the judgements, each with its
reason. What counts as a second home:

1. **A restated config default.** A parameter of a function or method (typer options too: the first argument
   of ``typer.Option``), or a field of a dataclass or NamedTuple, named after a config field (or an alias in
   ``ALIASES``) with a literal default equal to that field's default. Config classes are every pydantic model
   in polyrl (``TrainConfig`` and all nested in it, ``EvalSuite``, ``ServeLimits``, the objectives' settings
   …) except the OpenAI-API request schemas (``NOT_CONFIG``), whose defaults are the API's. ``None`` says "not
   given" and is not compared. A name that means something else where it is a parameter is in ``HOMONYMS``.
   An alias asserts one meaning, so an aliased parameter with any other literal default disagrees with its
   field and counts too.
2. **A restated constant.** A literal default equal to a named constant that another signature gives the same
   parameter as its default (``device="cpu"`` where others say ``device=HOST``).
3. **A constant beside a literal config field.** A signature's default is a named constant while the config
   field of that name writes the same value as a literal: the field must reference the constant
   (``Field(DEFAULT_TEMPERATURE, …)`` beside ``generate(temperature=DEFAULT_TEMPERATURE)``).
4. **An override with its own default.** A method overriding a base class's method (constructors aside: they
   are no protocol) with another default for the same parameter: a caller of the protocol gets one default or
   the other depending on the object (harness tasks said ``medium``, the task protocol ``easy``).
5. **Twin config fields.** Two config classes with a field of the same name and the same literal default,
   unless ``INDEPENDENT`` lists the name with why they are separate knobs that merely start at the same value
   (twins that must be one value reference one constant instead).

Besides: a value the config gives once reaches the update once (``UpdateSettings`` held the loss aggregation
and the token budget twice, the learner reading one copy and the objective the other).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import torch
from default_homes import (
    ConfigField,
    Constant,
    Site,
    literal_fields_beside_constants,
    override_defaults,
    restated_config_defaults,
    restated_constants,
    second_homes,
    sites_in,
    twin_fields,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "polyrl"


def _field(owner: str, name: str, default, written: str | None = None) -> ConfigField:
    return ConfigField(owner, name, default, ast.parse(written or repr(default)).body[0].value)


# -- the finder ---------------------------------------------------------------------------------------------


def test_a_signature_restating_a_config_default_is_found_with_its_field():
    source = "def generate(prompts, temperature=1.0, top_p=0.9, device=None):\n    pass\n"
    fields = {"temperature": [_field("RLConfig", "temperature", 1.0)], "top_p": [_field("RLConfig", "top_p", 1.0)]}
    found = restated_config_defaults(sites_in(source, "m.py"), fields)
    assert found == ["m.py:1 generate(temperature=1.0) restates RLConfig.temperature"]


def test_dataclass_fields_and_typer_options_count_and_an_alias_that_disagrees_is_found():
    source = (
        "@dataclass\nclass Sampling:\n    temperature: float = 1.0\n    kind: ClassVar[str] = 'x'\n\n"
        "def cli(shared_prefill: bool = typer.Option(False, '--share')):\n    pass\n"
    )
    fields = {
        "temperature": [_field("RLConfig", "temperature", 1.0)],
        "share_prompts": [_field("RLConfig", "share_prompts", True)],
    }
    assert restated_config_defaults(sites_in(source, "m.py"), fields) == [
        "m.py:3 Sampling(temperature=1.0) restates RLConfig.temperature",
        "m.py:6 cli(shared_prefill=False) disagrees with RLConfig.share_prompts=True",
    ]


def test_a_homonym_and_none_are_not_restated_defaults():
    source = "def generate(seed=0, split='train', difficulty=None):\n    pass\n"
    fields = {
        "seed": [_field("TrainConfig", "seed", 0)],
        "split": [_field("DatasetSpec", "split", "train")],
        "difficulty": [_field("TaskSpec", "difficulty", "easy")],
    }
    assert restated_config_defaults(sites_in(source, "m.py"), fields) == []


def test_a_literal_equal_to_a_named_constant_of_the_same_parameter_is_found():
    sites = sites_in("def load(device='cpu'):\n    pass\n\ndef run(device='cuda'):\n    pass\n", "m.py")
    host = Constant(Site("n.py:1 f", "f", "device", ast.parse("HOST").body[0].value), "HOST", torch.device("cpu"))
    assert restated_constants(sites, [host], {}) == ["m.py:1 load(device='cpu') restates HOST"]


def test_a_literal_config_field_beside_a_constant_of_its_name_is_found():
    site = Site("m.py:1 generate", "generate", "temperature", ast.parse("DEFAULT_TEMPERATURE").body[0].value)
    constant = Constant(site, "DEFAULT_TEMPERATURE", 1.0)
    fields = {
        "temperature": [
            _field("RLConfig", "temperature", 1.0),
            _field("EvalConfig", "temperature", 1.0, "DEFAULT_TEMPERATURE"),
        ]
    }
    assert literal_fields_beside_constants(fields, [constant]) == [
        "RLConfig.temperature=1.0 is a literal beside DEFAULT_TEMPERATURE"
    ]


def test_an_override_with_another_default_than_its_protocol_is_found_and_a_constructor_is_not():
    class Protocol:
        def __init__(self, size=1):
            pass

        def generate(self, seed, difficulty="easy", split="train"):
            pass

    class Override(Protocol):
        def __init__(self, size=2):
            pass

        def generate(self, seed, difficulty="medium", split="train"):
            pass

    (found,) = override_defaults([Protocol, Override])
    mine, protocol = found.split(" overrides ")
    assert mine.endswith("Override.generate(difficulty='medium')")
    assert protocol.endswith("Protocol.generate(difficulty='easy')")


def test_twin_config_fields_count_unless_independent_or_one_constant():
    fields = {
        "temperature": [_field("A", "temperature", 1.0), _field("B", "temperature", 1.0)],
        "top_p": [_field("A", "top_p", 1.0, "DEFAULT_TOP_P"), _field("B", "top_p", 1.0, "DEFAULT_TOP_P")],
        "max_grad_norm": [_field("A", "max_grad_norm", 1.0), _field("B", "max_grad_norm", 1.0)],
    }
    assert twin_fields(fields) == ["A.temperature and B.temperature both default to 1.0"]


# -- the library --------------------------------------------------------------------------------------------


def test_every_default_in_src_has_one_home():
    found = second_homes()
    assert not found, f"{len(found)} defaults with a second home (see this file's docstring):\n" + "\n".join(found)


def _stored(function, name: str) -> dict[str, int]:
    """How often ``function`` passes each attribute of ``name`` as a keyword argument (stores a copy of it)."""
    counts: dict[str, int] = {}
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(function)))):
        if isinstance(node, ast.keyword) and isinstance(node.value, ast.Attribute):
            if isinstance(node.value.value, ast.Name) and node.value.value.id == name:
                counts[node.value.attr] = counts.get(node.value.attr, 0) + 1
    return counts


def test_the_update_settings_take_each_rl_field_once():
    from polyrl.learner.settings import UpdateSettings

    twice = {field: n for field, n in _stored(UpdateSettings.from_config.__func__, "rl").items() if n > 1}
    assert not twice, f"rl fields copied into UpdateSettings more than once (the learner and the objective): {twice}"
