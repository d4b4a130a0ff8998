"""Plugins of every extension kind, installed as `pip install` would leave them, work by name; broken ones
harm nobody.

An installed distribution is a `<name>.dist-info/` (METADATA + entry_points.txt) next to its modules in
a directory on sys.path. The `my_plugin` package is built from docs/plugins.md itself (its `my_plugin/…`
code blocks and its entry points), so the documented examples are the tested ones; the task plugin is
`examples/polyrl_plugin_example`.
"""

import importlib
import math
import re
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from polyrl.algos import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    KL_ESTIMATORS,
    OBJECTIVES,
    ObjectiveInputs,
    ObjectiveSettings,
    aggregate,
    get_advantage_estimator,
    get_objective,
    kl_penalty,
)
from polyrl.algos.gradient_surgery import SURGERIES, get_surgery
from polyrl.critic.value_losses import VALUE_LOSSES, value_loss
from polyrl.curriculum import SAMPLERS, make_sampler
from polyrl.device import HOST
from polyrl.envs.env_registry import ENVS, EnvConfig, get_env_task
from polyrl.envs.tool_formats import TOOL_FORMATS
from polyrl.errors import UserError
from polyrl.policy.backends import BACKENDS, GenerationConfig, make_backend
from polyrl.rewards.terms import REWARD_SOURCES
from polyrl.rollout import rollout
from polyrl.rollout.dispatch import ROLLOUT_KINDS
from polyrl.rollout.selfplay import LEARNABILITY
from polyrl.tasks import get_task, list_tasks
from polyrl.tasks.prefixes import TASK_PREFIXES
from polyrl.tasks.task_registry import TASKS
from polyrl.tasks.verifiers import DATASET_VERIFIERS
from polyrl.trackers import TRACKERS, LoggingConfig, open_trackers

ROOT = Path(__file__).resolve().parents[1]
REGISTRIES = (
    TASKS,
    ENVS,
    SAMPLERS,
    ADVANTAGE_ESTIMATORS,
    OBJECTIVES,
    AGGREGATIONS,
    KL_ESTIMATORS,
    VALUE_LOSSES,
    SURGERIES,
    BACKENDS,
    TASK_PREFIXES,
    DATASET_VERIFIERS,
    REWARD_SOURCES,
    TRACKERS,
    TOOL_FORMATS,
    LEARNABILITY,
    ROLLOUT_KINDS,
)


@pytest.fixture
def install(tmp_path, monkeypatch):
    """``install(dist, files, entry_points)``: write modules and a dist-info, then reload plugins.

    Built-ins register on import, once per process: each registry loads them into its real table first,
    then reads plugins into a copy, so nothing a test installs outlives it.
    """
    for registry in REGISTRIES:
        registry.load()
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
        monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def _install(dist: str, files: dict[str, str], entry_points: dict[str, dict[str, str]]) -> None:
        for path, source in files.items():
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(source)
            written.append(path.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
        info = tmp_path / f"{dist}-0.1.dist-info"
        info.mkdir()
        info.joinpath("METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        groups = "".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items())
            for group, entries in entry_points.items()
        )
        info.joinpath("entry_points.txt").write_text(groups)
        importlib.invalidate_caches()

    yield _install
    for module in written:
        sys.modules.pop(module, None)
    sys.modules.pop("my_plugin", None)


def docs_plugin() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The ``my_plugin`` package of docs/plugins.md: its modules and its entry points."""
    text = (ROOT / "docs" / "plugins.md").read_text()
    files = {"my_plugin/__init__.py": ""}
    for block in re.findall(r"```python\n(# (my_plugin/\S+\.py)\n.*?)```", text, re.S):
        files[block[1]] = block[0]
    pyproject = next(b for b in re.findall(r"```toml\n(.*?)```", text, re.S) if 'name = "my-plugin"' in b)
    return files, tomllib.loads(pyproject)["project"]["entry-points"]


@pytest.fixture
def my_plugin(install):
    files, entry_points = docs_plugin()
    install("my_plugin", files, entry_points)


def example_task_plugin(install, entry_point: str = "polyrl_plugin_example:CountVowels") -> None:
    source = ROOT / "examples" / "polyrl_plugin_example" / "src" / "polyrl_plugin_example" / "__init__.py"
    files = {"polyrl_plugin_example/__init__.py": source.read_text()}
    install("polyrl_plugin_example", files, {"polyrl.tasks": {"count_vowels": entry_point}})


# --- the documented plugin, one kind at a time ---------------------------------------------------------------


def test_docs_show_one_module_per_kind():
    files, entry_points = docs_plugin()
    assert len(files) == 1 + 15  # __init__ and one module per kind
    assert set(entry_points) == {
        "polyrl.task_prefixes",
        "polyrl.verifiers",
        "polyrl.trackers",
        "polyrl.tool_formats",
        "polyrl.learnability",
        "polyrl.envs",
        "polyrl.samplers",
        "polyrl.advantages",
        "polyrl.objectives",
        "polyrl.aggregations",
        "polyrl.kl",
        "polyrl.value_losses",
        "polyrl.gradient_surgery",
        "polyrl.backends",
        "polyrl.rollout_kinds",
        "polyrl.tasks",
    }


def test_plugin_environment_plays_by_name(my_plugin):
    task = get_env_task("env/higher_lower")
    problem = task.generate(0, "easy")
    env = task.make_env(problem)
    env.reset()
    low = env.step(f"<answer>{problem.answer - 1}</answer>") if problem.answer > 1 else None
    assert low is None or low.observation[0]["content"] == "higher"
    done = env.step(f"<answer>{problem.answer}</answer>")
    assert done.done and done.info["success"]


def test_plugin_sampler_favours_unseen_tasks(my_plugin):
    sampler = make_sampler("least_seen", ["a", "b"])
    sampler.update("a", [1.0, 0.0, 1.0])
    # weights 1 / (1 + 3) and 1 / (1 + 0), normalized: 0.2, 0.8
    np.testing.assert_allclose(sampler.weights(), [0.2, 0.8])


def test_plugin_advantage_subtracts_the_group_median(my_plugin):
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.5])
    # group 0: median of (1, 0, 0) = 0; group 1: median of (1, 1, 0.5) = 1
    advantages = get_advantage_estimator("group_median")(rewards, [0, 0, 0, 1, 1, 1])
    torch.testing.assert_close(advantages, torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, -0.5]))


def test_plugin_objective_is_plain_policy_gradient_with_every_option(my_plugin):
    from my_plugin.objectives import VanillaPGSettings

    settings = ObjectiveSettings(0.2, 0.28, "token_mean", None, None, True, None, own=VanillaPGSettings())
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -0.5]], requires_grad=True)
    batch = ObjectiveInputs(
        logprobs,
        logprobs.detach() + 1.0,
        torch.tensor([2.0, 7.0]),
        torch.ones(2, 2),
        truncated=torch.tensor([False, True]),
    )
    loss, stats = get_objective("vanilla_pg")(batch, settings)
    loss.backward()
    # the truncated second completion is masked: loss = -A = -2 over 2 tokens, gradient -2 / 2 per token
    torch.testing.assert_close(loss, torch.tensor(-2.0))
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.0, -1.0], [0.0, 0.0]]))
    torch.testing.assert_close(stats["masked_truncated_fraction"].over(), torch.tensor(0.5))


def test_plugin_objective_reads_its_own_settings(my_plugin):
    from my_plugin.objectives import VanillaPGSettings

    settings = ObjectiveSettings(
        0.2, 0.28, "token_mean", None, None, False, None, own=VanillaPGSettings(advantage_clip=2)
    )
    logprobs = torch.zeros(2, 1, requires_grad=True)
    batch = ObjectiveInputs(logprobs, logprobs.detach(), torch.tensor([5.0, -1.0]), torch.ones(2, 1))
    loss, _ = get_objective("vanilla_pg")(batch, settings)
    torch.testing.assert_close(loss, torch.tensor(-(2.0 - 1.0) / 2))  # A = 5 clipped to 2


def test_plugin_objective_settings_are_validated_by_the_config(my_plugin, tiny_train_config):
    from my_plugin.objectives import VanillaPGSettings

    config = tiny_train_config(rl__objective="vanilla_pg", rl__objective_settings={"advantage_clip": 3.0})
    assert config.rl.objective_settings == {"advantage_clip": 3.0}
    assert tiny_train_config(rl__objective="vanilla_pg").rl.objective_settings == {"advantage_clip": None}
    from polyrl.learner.settings import UpdateSettings

    assert UpdateSettings.from_config(config.rl).objective_settings.own == VanillaPGSettings(advantage_clip=3.0)
    with pytest.raises(
        UserError, match=r"rl.objective_settings.advantage_clip \(vanilla_pg\): Input should be greater"
    ):
        tiny_train_config(rl__objective="vanilla_pg", rl__objective_settings={"advantage_clip": -1})
    with pytest.raises(UserError, match=r"rl.objective_settings.clip \(vanilla_pg\): unknown option"):
        tiny_train_config(rl__objective="vanilla_pg", rl__objective_settings={"clip": 1})


def test_plugin_backend_is_built_by_name_with_its_options(my_plugin):
    from polyrl.policy import TransformersBackend
    from polyrl.policy.loading import ModelConfig, load_policy

    policy = load_policy(ModelConfig(path="tiny"), seed=0, device=HOST)
    generation = GenerationConfig(engine="hf_generate", options={"repetition_penalty": 1.0})
    backend = make_backend(generation, policy.model, policy.tokenizer, 0, True, policy.device)
    assert type(backend).__name__ == "HFGenerate" and backend.penalty == 1.0
    prompts = [policy.tokenizer.encode("12+30="), policy.tokenizer.encode("7*8=")]
    # greedy, no penalty: the same completions as the built-in engine's
    ours = backend.generate(prompts, max_new_tokens=6, greedy=True)
    builtin = TransformersBackend(policy.model, policy.tokenizer, device=HOST).generate(
        prompts, max_new_tokens=6, greedy=True
    )
    assert [(g.completion_ids, g.finished) for g in ours] == [(g.completion_ids, g.finished) for g in builtin]


def test_plugin_backend_options_are_validated_by_the_config(my_plugin, tiny_train_config):
    config = tiny_train_config(generation={"engine": "hf_generate", "options": {"repetition_penalty": 1.2}})
    assert config.generation.options == {"repetition_penalty": 1.2}
    with pytest.raises(UserError, match="repetition_penalty"):
        tiny_train_config(generation={"engine": "hf_generate", "options": {"repetition_penalty": 0}})
    with pytest.raises(UserError, match="unknown generation backend 'hf_generat'; did you mean hf_generate"):
        tiny_train_config(generation={"engine": "hf_generat"})


def test_a_run_generates_with_the_plugin_backend(my_plugin, tiny_train_config, monkeypatch):
    """RL rollouts and held-out evaluation go through the configured engine."""
    from my_plugin.backends import HFGenerate

    from polyrl.train.trainer import Trainer

    calls = []
    original = HFGenerate.generate
    monkeypatch.setattr(
        HFGenerate, "generate", lambda self, prompts, **kw: calls.append(len(prompts)) or original(self, prompts, **kw)
    )
    config = tiny_train_config(
        generation={"engine": "hf_generate"}, sft__steps=2, rl__steps=1, eval={"problems_per_task": 2, "pass_k": 1}
    )
    trainer = Trainer(config)
    assert isinstance(trainer.parts.backend, HFGenerate)
    trainer.run()
    assert len(calls) >= 3  # after-SFT evaluation, the RL step, after-RL evaluation


def test_plugin_aggregation_sums_tokens_and_averages_sequences(my_plugin):
    values, mask = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]), torch.tensor([[1, 1, 1], [1, 0, 0]])
    torch.testing.assert_close(aggregate(values, mask, "seq_mean_token_sum"), torch.tensor((6.0 + 4.0) / 2))


def test_plugin_kl_estimator_named_by_function_is_capped(my_plugin):
    # log r = 0 - (-30) = 30: k3 = e^30 - 31, capped at 10; at log r = ln 2: 2 - ln 2 - 1
    kl = kl_penalty(torch.tensor([[-30.0, 0.0]]), torch.tensor([[0.0, math.log(2.0)]]), "k3_clamped")
    torch.testing.assert_close(kl, torch.tensor([[10.0, 1.0 - math.log(2.0)]]))


def test_plugin_value_loss_is_huber_on_a_scalar_head(my_plugin):
    assert VALUE_LOSSES.lookup("huber").head_size(51) == 1
    # errors 0.5 and 3: 0.5 * 0.5^2 = 0.125 and 3 - 0.5 = 2.5; mean 1.3125
    loss = value_loss(
        torch.tensor([[0.0, 3.0]]), torch.tensor([[0.5, 0.0]]), torch.ones(1, 2), "huber", -1.0, 1.5, 0.75
    )
    torch.testing.assert_close(loss, torch.tensor(1.3125))


def test_plugin_surgery_keeps_the_coordinates_tasks_agree_on(my_plugin):
    grads = torch.tensor([[1.0, 2.0, -1.0], [3.0, -1.0, -2.0]])
    # signs agree on coordinates 0 and 2: the sum [4, 1, -3] is kept there
    torch.testing.assert_close(get_surgery("and_mask")(grads, None), torch.tensor([4.0, 0.0, -3.0]))


def test_plugin_prefix_makes_a_task_of_every_name_it_starts(my_plugin):
    task = get_task("count/e")
    problem = task.generate(3)
    assert problem.task == "count/e" and problem.answer == problem.question.split("'")[3].count("e")
    assert task.verify(problem, task.reference_response(problem)).correct
    with pytest.raises(UserError, match="count/ takes one lowercase letter"):
        get_task("count/ee")


def test_plugin_verifier_accepts_the_items_in_any_order(my_plugin):
    check = DATASET_VERIFIERS.lookup("unordered_list").bind("unordered_list", {})
    assert (check("Blue, red", "red,blue"), check("red", "red,blue")) == (1.0, 0.0)


def test_plugin_tracker_writes_every_scalar(my_plugin, tmp_path):
    (tracker,) = open_trackers(LoggingConfig(trackers=["csv"]), tmp_path, {})
    tracker.log({"stage": "rl", "step": 3, "global_step": 7, "loss": 0.5})
    tracker.close()
    assert (tmp_path / "metrics.csv").read_text().splitlines() == ["step,name,value", "7,rl/loss,0.5"]


def test_plugin_tool_format_writes_and_parses_its_calls(my_plugin):
    task = get_env_task("env/calculator:addition", EnvConfig(tool_format="call_tags"))
    problem = task.generate(0, "easy")
    call, answer = task.reference_actions(problem)
    assert call.startswith("<call>{") and answer == f"<answer>{problem.answer}</answer>"
    env = task.make_env(problem)
    env.reset()
    assert env.step(call).observation[0]["content"] == str(problem.answer)


def test_plugin_learnability_is_a_selfplay_reward(my_plugin, tiny_train_config):
    assert LEARNABILITY.lookup("squared_variance")(0.25) == 0.5625  # (4 * 0.25 * 0.75)^2
    assert tiny_train_config(selfplay__reward="squared_variance").selfplay.reward == "squared_variance"
    with pytest.raises(UserError, match="unknown learnability 'squared_varianse'; did you mean squared_variance"):
        tiny_train_config(selfplay__reward="squared_varianse")


def test_plugins_sit_next_to_the_builtins(my_plugin):
    assert {"higher_lower", "retry"} <= set(ENVS.names())
    assert {"least_seen", "uniform"} <= set(SAMPLERS.names())
    assert {"vanilla_pg", "ppo_clip"} <= set(OBJECTIVES.names())
    assert {"k3_clamped", "k3"} <= set(KL_ESTIMATORS.names())
    assert {"hf_generate", "transformers", "vllm"} <= set(BACKENDS.names())
    assert {"count/", "env/"} <= set(TASK_PREFIXES.names())
    assert {"csv", "tensorboard"} <= set(TRACKERS.names())
    assert {"call_tags", "hermes"} <= set(TOOL_FORMATS.names())
    assert {"squared_variance", "variance"} <= set(LEARNABILITY.names())
    assert {"unordered_list", "numeric"} <= set(DATASET_VERIFIERS.names())


# --- the task plugin -----------------------------------------------------------------------------------------


def test_installed_plugin_task_is_found_by_name(install):
    example_task_plugin(install)
    task = get_task("count_vowels")
    problem = task.generate(3, "hard")
    assert task.verify(problem, task.reference_response(problem)).correct
    assert [c.name for c in list_tasks("text")] == ["count_vowels"]
    assert "addition" in {c.name for c in list_tasks()}


def test_plugin_missing_its_class_warns(install, capsys):
    example_task_plugin(install, "polyrl_plugin_example:CountVowelz")
    assert get_task("addition").name == "addition"
    assert "warning: task plugin 'count_vowels'" in capsys.readouterr().err
    with pytest.raises(UserError, match="unknown task 'count_vowels'"):
        get_task("count_vowels")


# --- broken plugins ------------------------------------------------------------------------------------------


def test_broken_plugin_warns_once_and_builtins_still_work(install, capsys):
    install(
        "broken", {"broken_plugin.py": "raise RuntimeError('boom')\n"}, {"polyrl.objectives": {"pg": "broken_plugin"}}
    )
    assert get_objective("ppo_clip") is not None
    assert OBJECTIVES.names() and "pg" not in OBJECTIVES.names()
    err = capsys.readouterr().err
    assert err.count("warning: policy objective plugin 'pg' (broken_plugin) failed to load: boom") == 1


def test_plugin_taking_a_builtin_name_is_skipped_with_a_warning(install, capsys):
    source = textwrap.dedent(
        """
        from polyrl.algos import register_advantage

        @register_advantage("grpo")
        def grpo(rewards, group_ids, eps=1e-6):
            return rewards
        """
    )
    install("hijack", {"hijack_plugin.py": source}, {"polyrl.advantages": {"grpo": "hijack_plugin"}})
    estimator = get_advantage_estimator("grpo")
    assert estimator.__module__ == "polyrl.algos.advantages"
    assert "already registered" in capsys.readouterr().err


def test_plugin_object_of_the_wrong_kind_is_skipped_with_a_warning(install, capsys):
    install(
        "notatask", {"notatask.py": "class NotATask:\n    name = 'x'\n"}, {"polyrl.tasks": {"x": "notatask:NotATask"}}
    )
    assert TASKS.names() and "x" not in TASKS.names()
    assert "register_task expects a Task subclass" in capsys.readouterr().err


def test_plugin_rollout_kind_plays_its_task_s_problems(my_plugin, prompts, scripted, tiny_tokenizer):
    from rollout_sampling import sampling

    task = get_task("primed_addition")
    assert task.rollout_kind == "primed" and ROLLOUT_KINDS.lookup("primed").episodic is False
    trajs = rollout(
        [task.generate(0)], {task.name: task}, scripted(lambda _: "<answer>0</answer>"), prompts, sampling(2, 8)
    )
    assert [t.task for t in trajs] == ["primed_addition"] * 2 and [t.group for t in trajs] == [0, 0]
    # the primer is context the policy did not write: it ends the prompt, not the response
    assert all(tiny_tokenizer.decode(t.prompt_ids).endswith("Step by step: ") for t in trajs)
    assert all(t.text == "<answer>0</answer>" for t in trajs)
