"""The weakness sampler: failed problems recorded, problems near them drawn, state checkpointed, sources logged."""

import json
from pathlib import Path

import numpy as np
import pytest

from polyrl.curriculum import make_sampler
from polyrl.curriculum.weakness import neighbour_params
from polyrl.errors import UserError
from polyrl.tasks import Param, get_task
from polyrl.tasks.base import DifficultySpace

TASKS = {"compose/rev": get_task("compose/rev"), "compose/up": get_task("compose/up")}
EASY = {"length": 4, "alphabet": 6}


def difficulty(name):
    return EASY


def failed(sampler, seed=7, task="compose/rev", scores=(0.0, 0.5)):
    problem = TASKS[task].generate(seed, EASY)
    sampler.observe(problem, list(scores))
    return problem


def test_a_group_without_a_correct_completion_is_recorded():
    s = make_sampler("weakness", list(TASKS))
    failed(s)
    failed(s, seed=8, scores=(1.0, 0.0))  # solved: not recorded
    assert s.metrics() == {"synth/pool_size": 1.0, "synth/recorded": 1.0, "synth/solved": 0.0, "synth/retired": 0.0}


def test_a_recorded_problem_leaves_when_solved_or_after_max_failures():
    s = make_sampler("weakness", list(TASKS), {"max_failures": 3})
    failed(s, seed=1)
    failed(s, seed=1, scores=(1.0,))
    for _ in range(3):
        failed(s, seed=2)
    assert s.metrics() == {"synth/pool_size": 0.0, "synth/recorded": 2.0, "synth/solved": 1.0, "synth/retired": 1.0}


def test_the_oldest_record_leaves_a_full_pool():
    s = make_sampler("weakness", list(TASKS), {"pool_size": 2})
    for seed in (1, 2, 3):
        failed(s, seed=seed)
    assert sorted(r.seed for r in s.pool.values()) == [2, 3]


def test_with_an_empty_record_it_draws_exactly_what_uniform_draws():
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    a = make_sampler("weakness", list(TASKS)).draw(8, rng_a, TASKS, difficulty)
    b = make_sampler("uniform", list(TASKS)).draw(8, rng_b, TASKS, difficulty)
    assert [p.id for p in a] == [p.id for p in b]
    assert {p.source for p in a} == {"generated"}


def test_replay_draws_the_failed_problem_again():
    s = make_sampler("weakness", list(TASKS), {"share": 1.0, "replay": 1.0})
    original = failed(s)
    drawn = s.draw(4, np.random.default_rng(0), TASKS, difficulty)
    assert [(p.id, p.source) for p in drawn] == [(original.id, "replay")] * 4


def test_neighbours_are_the_same_task_one_parameter_step_away():
    s = make_sampler("weakness", list(TASKS), {"share": 1.0, "replay": 0.0})
    original = failed(s)
    drawn = s.draw(6, np.random.default_rng(0), TASKS, difficulty)
    for p in drawn:
        assert (p.task, p.source) == ("compose/rev", "synthesized")
        moved = {k: abs(p.params[k] - original.params[k]) for k in p.params if p.params[k] != original.params[k]}
        # both start at their lowest value: length (span 8) moves up 1, alphabet (span 20) up 2
        assert moved in ({"length": 1}, {"alphabet": 2})


def test_neighbour_params_stay_inside_the_range():
    space = DifficultySpace((Param("n", 1, 5), Param("fixed", 2, 2)))
    rng = np.random.default_rng(0)
    assert {neighbour_params(space, {"n": 5, "fixed": 2}, rng)["n"] for _ in range(20)} == {4}
    assert {neighbour_params(space, {"n": 3, "fixed": 2}, rng)["n"] for _ in range(40)} == {2, 4}


def test_state_round_trips():
    s = make_sampler("weakness", list(TASKS))
    failed(s, seed=1)
    failed(s, seed=1)
    fresh = make_sampler("weakness", list(TASKS))
    fresh.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert fresh.state_dict() == s.state_dict()
    assert next(iter(fresh.pool.values())).failures == 2


@pytest.mark.parametrize(
    "options, message",
    [
        ({"share": 1.5}, "share"),
        ({"replay": -0.1}, "replay"),
        ({"pool_size": 0}, "pool_size"),
        ({"max_failures": 1.5}, "max_failures"),
    ],
)
def test_bad_options_are_user_errors(options, message):
    with pytest.raises(UserError, match=message):
        make_sampler("weakness", list(TASKS), options)


def test_a_training_run_logs_problem_sources_and_the_pool(tiny_train_config):
    from polyrl.train.trainer import Trainer

    cfg = tiny_train_config(
        tasks=[
            {"name": "compose/rev", "difficulty": {"length": 6}},
            {"name": "compose/sort", "difficulty": {"length": 6}},
        ],
        sampler={"name": "weakness", "options": {"share": 0.5}},
        sft={"enabled": False},
    )
    Trainer(cfg).run()
    rl = [json.loads(line) for line in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rl if r.get("stage") == "rl"]
    assert rl[0]["source/generated"] == 1.0  # nothing failed yet
    assert rl[-1]["synth/pool_size"] > 0  # an untrained model fails, and its failures are recorded
    assert any(r.get("source/synthesized", 0) + r.get("source/replay", 0) > 0 for r in rl[1:])
    assert all(abs(sum(v for k, v in r.items() if k.startswith("source/")) - 1.0) < 1e-9 for r in rl)
    from polyrl.train.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(Path(cfg.run_dir) / "checkpoints")
    assert (ckpt.stage, ckpt.step) == ("rl", rl[-1]["step"])
    assert len(ckpt.state["sampler"]["pool"]) == rl[-1]["synth/pool_size"]  # the record is checkpointed
    from polyrl.report.html import build_report

    page, pngs = build_report(cfg.run_dir)
    assert any(p.name.endswith("_sources.png") for p in pngs)
    assert "synthesized near failures" in page.read_text()


def test_the_report_draws_problem_sources_only_when_some_were_not_generated():
    from polyrl.report.plots import problem_sources

    plain = [{"step": s, "source/generated": 1.0} for s in (1, 2)]
    assert problem_sources(plain) is None
    mixed = [
        {"step": 1, "source/generated": 1.0, "synth/pool_size": 3.0},
        {"step": 2, "source/generated": 0.75, "source/synthesized": 0.25, "synth/pool_size": 5.0},
    ]
    fig = problem_sources(mixed)
    assert [ax.get_title() for ax in fig.axes if ax.get_visible()] == [
        "where the step's problems came from",
        "record of failed problems",
    ]
