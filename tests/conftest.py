import copy
import os
import random
import re

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_addoption(parser):
    parser.addoption(
        "--test-order",
        default="file",
        help="file (default), reverse, or random:SEED (modules in a random order, and the tests within each): "
        "runs the suite in another order, to find a test that depends on the ones before it",
    )


def pytest_collection_modifyitems(config, items):
    order = config.getoption("--test-order")
    if order == "file":
        return
    if order == "reverse":
        items.reverse()
        return
    kind, _, seed = order.partition(":")
    if kind != "random" or re.fullmatch(r"-?[0-9]+", seed) is None:  # not isdigit(): '²' and '٣' are digits too
        raise pytest.UsageError(f"--test-order {order!r}: give file, reverse or random:SEED (e.g. random:1)")
    rng = random.Random(int(seed))
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    groups = list(modules.values())
    rng.shuffle(groups)
    for group in groups:  # a module's tests stay together, so its module-scoped fixtures are built once
        rng.shuffle(group)
    items[:] = [item for group in groups for item in group]


def _forgetting_new_tasks():
    """Tasks registered while this generator is suspended leave the process-wide task registry after it."""
    from polyrl.tasks.task_registry import TASKS

    before = set(TASKS.names())
    yield
    for name in set(TASKS.names()) - before:
        TASKS.remove(name)


@pytest.fixture(autouse=True, scope="module")
def _tasks_registered_by_a_module_end_with_it():
    """Tasks a test module registers (a dataset task a config names, a test's own task class) are forgotten when
    the module ends, so no module sees another's: the task registry is process-global, and a module that lists
    every task (``list_tasks()``) would otherwise depend on which modules ran before it."""
    yield from _forgetting_new_tasks()


@pytest.fixture
def forget_new_tasks():
    """The same for one test: what it registers is forgotten when it ends (``pytestmark = usefixtures(...)``)."""
    yield from _forgetting_new_tasks()


TINY_TRAIN = {
    "seed": 0,
    "model": {"path": "tiny", "tiny": {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}},
    "prompt": {"field": "question"},
    "tasks": [{"name": "addition", "difficulty": "easy"}, {"name": "sort_digits", "difficulty": "easy"}],
    "sft": {"steps": 6, "batch_size": 8, "warmup_steps": 1},
    "rl": {
        "steps": 6,
        "prompts_per_step": 4,
        "group_size": 4,
        "max_new_tokens": 8,
        "epochs": 2,
        "minibatches": 2,
        "dynamic_sampling": False,
    },
    "eval": {"problems_per_task": 4, "pass_k": 2},
    "checkpoint_every": 3,
    "tensorboard": True,
    "progress": False,
}


@pytest.fixture(scope="session")
def tiny_train_settings() -> dict:
    """``TINY_TRAIN``, for a fixture wider than one test (``tiny_train_config`` is one test's)."""
    return copy.deepcopy(TINY_TRAIN)


@pytest.fixture
def tiny_train_config(tmp_path):
    """A TrainConfig for a seconds-long run of the whole pipeline in a fresh run directory."""
    from polyrl.train.config import load_config

    def make(**updates):
        data = {**TINY_TRAIN, "run_dir": str(tmp_path / "run")}
        for key, value in updates.items():
            section, _, field = key.partition("__")
            if field:
                data[section] = {**data.get(section, {}), field: value}
            else:
                data[key] = value
        return load_config(None, base=data)

    return make


@pytest.fixture
def interrupted_run(monkeypatch):
    """``interrupted_run(cfg)`` trains ``cfg`` until RL step 5 is logged, then stops it as Ctrl-C would (its
    checkpoints, rl-000003 with ``checkpoint_every: 3``, stay)."""
    from polyrl.run_dir import RunDir
    from polyrl.train.trainer import Trainer

    def interrupt(cfg) -> None:
        real_log = RunDir.log

        def stop_at_rl_5(self, record):
            real_log(self, record)
            if record["stage"] == "rl" and record["step"] == 5:
                raise KeyboardInterrupt

        monkeypatch.setattr(RunDir, "log", stop_at_rl_5)
        with pytest.raises(KeyboardInterrupt):
            Trainer(cfg).run()
        monkeypatch.setattr(RunDir, "log", real_log)

    return interrupt


@pytest.fixture
def fake_openai():
    """``fake_openai(script)`` starts a fake OpenAI-compatible server (tests/fake_openai.py), shut down after the test."""
    from fake_openai import FakeOpenAI

    started = []

    def start(script) -> FakeOpenAI:
        started.append(FakeOpenAI(script))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """The embedded tiny model's tokenizer (with its chat template)."""
    from polyrl.policy.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture
def prompts(tiny_tokenizer):
    """Prompts as the tiny model's runs build them: the bare question through its chat template."""
    from polyrl.policy.prompts import PromptBuilder, PromptConfig

    return PromptBuilder(tiny_tokenizer, PromptConfig(field="question"))


@pytest.fixture
def scripted(tiny_tokenizer):
    """``scripted(script)``: a generation backend whose reply to each prompt text is ``script(text)``, recording
    what it was asked (tests/scripted_backend.py)."""
    from scripted_backend import ScriptedBackend

    return lambda script: ScriptedBackend(tiny_tokenizer, script)


TINY_SHAPE = TINY_TRAIN["model"]["tiny"]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny model of ``TINY_TRAIN``'s shape (seed 0) saved as a plain Hugging Face checkpoint."""
    from polyrl.device import HOST
    from polyrl.policy.loading import ModelConfig, load_policy

    path = tmp_path_factory.mktemp("tiny_model") / "model"
    load_policy(ModelConfig(path="tiny", tiny=TINY_SHAPE), seed=0, device=HOST).save(path)
    return path


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache (HF_HUB_CACHE) with HF_HUB_OFFLINE=1, for this process and its children;
    ``hub_cache.lay_out(...)`` (tests/hub_cache.py) fills it."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache
