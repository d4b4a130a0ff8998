"""Self-play: the arithmetic game's proposal verifier, the proposer's learnability reward, the collector that plays
one step of the game, the config checks, and short training runs on the tiny model."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from polyrl.errors import UserError
from polyrl.rollout.collect import Collected
from polyrl.rollout.selfplay import LEARNABILITY, SelfPlay, SelfPlaySettings, azr, triangle, variance
from polyrl.rollout.trajectory import Trajectory
from polyrl.tasks import get_task
from polyrl.tasks.builtin.arithmetic_proposals import InvalidProposal, parse_proposal

PROPOSER = get_task("propose_expression")
SOLVER = get_task("expression_evaluation")


def _proposal_problem(operands=3, max_number=9, required=7):
    """A propose_expression problem with the given constraints (generated, then its constraints pinned)."""
    p = PROPOSER.generate(0, "easy")
    p.answer = {"operands": operands, "max_number": max_number, "required": required}
    return p


# --- the proposal verifier ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [("7+2*3=13", 13), ("(7+2)*3=27", 27), (" 7 - 8 - 9 = -10", -10), ("7*(8-(9*1))=-7", None)],
)
def test_valid_proposals_parse_to_their_exact_value(text, value):
    if value is None:  # 4 numbers where 3 are asked for
        with pytest.raises(InvalidProposal, match="wrong_operands"):
            parse_proposal(text, 3, 9, 7)
        return
    p = parse_proposal(text, 3, 9, 7)
    assert p.value == value and len(p.numbers) == 3 and 7 in p.numbers
    assert " " not in p.expression


@pytest.mark.parametrize(
    "text, reason",
    [
        ("7+2*3", "no_claim"),
        ("7+2*3=", "no_claim"),
        ("7+2*3=13=13", "unparseable"),
        ("7+2/3=9", "unparseable"),  # division is not in the game
        ("7+2**3=15", "unparseable"),
        ("__import__('os')=1", "unparseable"),
        ("7+2*3=thirteen", "unparseable"),
        ("-7+2*3=-1", "unparseable"),  # no unary minus
        ("7+2=9", "wrong_operands"),
        ("7+2*30=67", "out_of_range"),
        ("1+2*3=7", "missing_number"),
        ("7+2*3=14", "wrong_claim"),
        ("7+2*3=" + "1" * 200, "too_long"),
    ],
)
def test_invalid_proposals_name_their_reason(text, reason):
    with pytest.raises(InvalidProposal) as info:
        parse_proposal(text, 3, 9, 7)
    assert info.value.reason == reason


@pytest.mark.parametrize(
    "answer, reason",
    [
        ("9" * 100_000 + "=1", "malformed"),  # over the answer extractor's limit
        ("9" * 110 + "+7+1=1", "unparseable"),  # a number over 12 digits is not even read
        ("9" * 12 + "*7*1=6999999999993", "out_of_range"),
        ("(" * 60 + "7" + ")" * 60 + "=7", "too_long"),
        ("(" * 9 + "7+1+2" + ")" * 9 + "=10", "unparseable"),  # nesting deeper than 8
        ("x" * 100_000, "malformed"),
        ("\x00\ufffe\U0001f600" * 30_000, "malformed"),
        ("7*" * 50 + "7=1", "wrong_operands"),
    ],
)
def test_hostile_proposals_are_invalid_quickly_and_never_raise(answer, reason):
    problem = _proposal_problem()
    start = time.thread_time()  # this thread's CPU time: what the verifier costs, whatever else the machine runs
    verdict = PROPOSER.verify(problem, f"<answer>{answer}</answer>")
    assert time.thread_time() - start < 0.05
    assert (verdict.score, verdict.correct, verdict.reason) == (0.0, False, reason)


def test_junk_without_an_answer_is_counted_as_no_answer():
    verdict = PROPOSER.verify(_proposal_problem(), "x" * 100_000)
    assert (verdict.correct, verdict.reason) == (False, "no_answer")


def test_a_valid_proposal_becomes_a_proposed_solver_problem():
    proposal = _proposal_problem()
    verdict = PROPOSER.verify(proposal, "<answer>(7 + 2) * 3 = 27</answer>")
    assert verdict.correct and verdict.reason == "correct"
    problem = PROPOSER.proposed_problem(verdict.answer, proposal, SOLVER)
    assert (problem.task, problem.question, problem.answer, problem.source) == (
        "expression_evaluation",
        "(7+2)*3=",
        27,
        "proposed",
    )
    assert problem.params == {"operators": 2, "digits": 1}
    assert SOLVER.verify(problem, "<answer>27</answer>").correct
    assert PROPOSER.proposal_stats(problem) == {"operands": 3.0, "answer_digits": 2.0}
    # the same expression is the same problem (its seed is the expression's hash)
    again = PROPOSER.proposed_problem("(7+2)*3=27", proposal, SOLVER)
    assert again.id == problem.id


def test_the_prompt_asks_for_what_the_verifier_checks():
    for seed in range(20):
        p = PROPOSER.generate(seed, "easy")
        n, top, k = p.answer["operands"], p.answer["max_number"], p.answer["required"]
        assert 2 <= n <= 3 and top == 9 and 0 <= k <= 9
        assert p.question == f"propose {n} numbers 0-{top} with {k}:"
        assert f"exactly {n} whole numbers from 0 to {top}, one of which is {k}" in p.natural_question
        assert PROPOSER.verify(p, PROPOSER.reference_response(p)).correct


# --- the proposer's reward ------------------------------------------------------------------------------------


def test_learnability_rewards_by_hand():
    assert [variance(p) for p in (0.0, 0.25, 0.5, 0.875, 1.0)] == [0.0, 0.75, 1.0, 0.4375, 0.0]
    assert [triangle(p) for p in (0.0, 0.25, 0.5, 0.875, 1.0)] == [0.0, 0.5, 1.0, 0.25, 0.0]
    assert [azr(p) for p in (0.0, 0.25, 0.5, 0.875, 1.0)] == [0.0, 0.75, 0.5, 0.125, 0.0]
    assert set(LEARNABILITY) == {"variance", "triangle", "azr"}


# --- one step of the game, with scripted completions -----------------------------------------------------------


def _trajectory(task, problem, text, verdict, group):
    return Trajectory(task.name, group, problem, [1], [5] * len(text), text, True, verdict.score, {}, verdict)


class ScriptedProposer:
    """Group source: each proposer prompt's group is the scripted texts, verified by the proposer task."""

    def __init__(self, texts):
        self.texts, self.asked = texts, []

    def groups(self, n, make_problems):
        problems = make_problems(n)
        self.asked.append(problems)
        out = []
        for g, problem in enumerate(problems):
            problem.answer = {"operands": 3, "max_number": 9, "required": 7}  # pin the constraints
            out.append([_trajectory(PROPOSER, problem, t, PROPOSER.verify(problem, t), g) for t in self.texts[g]])
        return out

    def stats(self):
        return {}


class ScriptedSolver:
    """Group source: answers a problem of value v correctly in ``correct[v]`` of its 4 completions."""

    def __init__(self, correct):
        self.correct, self.asked = correct, []

    def groups(self, n, make_problems):
        problems = make_problems(n)
        self.asked.append(problems)
        out = []
        for g, problem in enumerate(problems):
            k = self.correct[problem.answer]
            texts = [f"<answer>{problem.answer if i < k else problem.answer + 1}</answer>" for i in range(4)]
            out.append([_trajectory(SOLVER, problem, t, SOLVER.verify(problem, t), g) for t in texts])
        return out

    def stats(self):
        return {}


def _game(proposer_texts, correct, reward="variance", invalid_reward=0.0):
    tasks = {"propose_expression": PROPOSER, "expression_evaluation": SOLVER}
    settings = SelfPlaySettings("propose_expression", len(proposer_texts), reward, invalid_reward)
    return SelfPlay(settings, tasks, ScriptedProposer(proposer_texts), ScriptedSolver(correct))


TEXTS = [
    # prompt 0: valid (solved 2/4: p = 0.5), valid (solved 1/4), unparseable, no answer at all
    ["<answer>7+2*3=13</answer>", "<answer>7*2*3=42</answer>", "<answer>7+)=1</answer>", "seven"],
    # prompt 1: valid (always solved: p = 1), wrong claimed value, valid again (p = 0.5)
    ["<answer>7+1+1=9</answer>", "<answer>7+1+1=10</answer>", "<answer>7 + 2 * 3 = 13</answer>"],
]
SOLVED = {13: 2, 42: 1, 9: 4}


def test_one_step_of_the_game_by_hand():
    game = _game(TEXTS, SOLVED)
    scored = []
    collected = game.collect(np.random.default_rng(0), lambda name: "easy", scored.extend, dynamic_sampling=False)
    proposals = [t for t in collected.trajectories if t.task == "propose_expression"]
    # variance 4p(1-p): p=0.5 -> 1, p=0.25 -> 0.75, p=1 -> 0; invalid -> 0
    assert [t.reward for t in proposals] == [1.0, 0.75, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert [t.reward_terms for t in proposals][:2] == [{"learnability": 1.0}, {"learnability": 0.75}]
    solved = [t for t in collected.trajectories if t.task == "expression_evaluation"]
    assert len(solved) == 4 * 4 and all(t.problem.source == "proposed" for t in solved)
    assert scored == solved  # the batched reward terms score the solver's completions only
    assert [p.question for p in game.solvers.asked[0]] == ["7+2*3=", "7*2*3=", "7+1+1=", "7+2*3="]
    # groups: 2 proposer groups, then one per valid proposal, numbered 0..5
    assert sorted({t.group for t in collected.trajectories}) == list(range(6))
    assert (collected.groups_generated, collected.groups_dropped) == (6, 0)
    m = collected.extra
    assert m["selfplay/proposals"] == 7.0 and m["selfplay/invalid"] == 3.0
    assert (m["selfplay/invalid/unparseable"], m["selfplay/invalid/no_answer"]) == (1.0, 1.0)
    assert m["selfplay/invalid/wrong_claim"] == 1.0
    assert m["role/proposer/valid"] == pytest.approx(4 / 7)
    assert m["role/proposer/reward"] == pytest.approx(2.75 / 7)
    assert m["role/proposer/learnability"] == pytest.approx(2.75 / 4)
    assert m["role/proposer/learnable"] == pytest.approx(3 / 4)
    assert m["role/proposer/distinct"] == pytest.approx(3 / 4)  # 7+2*3 twice
    assert m["role/proposer/operands"] == 3.0
    assert m["role/proposer/answer_digits"] == pytest.approx((2 + 2 + 1 + 2) / 4)
    assert m["role/solver/accuracy"] == pytest.approx((2 + 1 + 4 + 2) / 16)
    assert m["role/solver/problems"] == 4.0
    assert m["selfplay/pool_size"] == 3.0
    # examples: the first proposal of each prompt, then the second of each...
    ex = m["selfplay/examples"]
    assert [e["proposal"] for e in ex[:3]] == ["7+2*3=13", "7+1+1=9", "7*2*3=42"]
    assert ex[0] == {"proposal": "7+2*3=13", "valid": True, "reason": "correct", "solver_success": 0.5, "reward": 1.0}
    assert ex[-1]["valid"] is False and ex[-1]["solver_success"] is None
    json.dumps(m)  # the metrics record is JSON


def test_an_invalid_proposal_gets_the_invalid_reward():
    game = _game(TEXTS, SOLVED, invalid_reward=-0.5)
    collected = game.collect(np.random.default_rng(0), lambda name: "easy", lambda ts: None, dynamic_sampling=False)
    proposals = [t for t in collected.trajectories if t.task == "propose_expression"]
    # unparseable, no answer, wrong claimed value -> -0.5; the valid ones keep their learnability
    assert [t.reward for t in proposals] == [1.0, 0.75, -0.5, -0.5, 0.0, -0.5, 1.0]
    assert proposals[2].reward_terms == {"learnability": 0.0, "invalid": -0.5}
    assert proposals[4].reward_terms == {"learnability": 0.0}  # valid, always solved: 0, not the penalty
    m = collected.extra
    assert m["role/proposer/reward"] == pytest.approx((2.75 - 1.5) / 7)
    assert m["role/proposer/learnability"] == pytest.approx(2.75 / 4)  # over the valid proposals only
    # with only invalid proposals in a group, the group has no signal whatever the penalty
    junk = _game([["junk", "<answer>1=</answer>"]], SOLVED, invalid_reward=-1.0)
    dropped = junk.collect(np.random.default_rng(0), lambda name: "easy", lambda ts: None, dynamic_sampling=True)
    assert dropped.trajectories == [] and dropped.groups_dropped == 1


def test_dynamic_sampling_drops_groups_without_signal():
    game = _game(TEXTS, SOLVED, reward="azr")
    collected = game.collect(np.random.default_rng(0), lambda name: "easy", lambda ts: None, dynamic_sampling=True)
    # the solver group of 7+1+1 (solved 4/4) has no signal; both proposer groups do (azr: 0.5, 0.75, 0, 0 / 0, 0, 0.5)
    assert (collected.groups_generated, collected.groups_dropped) == (6, 1)
    assert sorted({t.group for t in collected.trajectories}) == list(range(5))
    assert collected.extra["role/proposer/reward"] == pytest.approx((0.5 + 0.75 + 0.5) / 7)


def test_a_step_with_no_valid_proposal_asks_the_solver_nothing():
    game = _game([["junk", "<answer>1=</answer>"]], SOLVED)
    collected = game.collect(np.random.default_rng(0), lambda name: "easy", lambda ts: None, dynamic_sampling=True)
    assert game.solvers.asked == []
    assert collected.trajectories == [] and collected.groups_dropped == 1
    m = collected.extra
    assert (m["selfplay/invalid"], m["selfplay/invalid/no_answer"], m["selfplay/invalid/no_claim"]) == (2.0, 1.0, 1.0)
    assert m["role/proposer/valid"] == 0.0 and "role/solver/accuracy" not in m


def test_merged_collections_number_groups_after_each_other():
    game = _game(TEXTS, SOLVED)
    first = game.collect(np.random.default_rng(0), lambda name: "easy", lambda ts: None, dynamic_sampling=False)
    second = _game(TEXTS[:1], SOLVED).collect(np.random.default_rng(1), lambda n: "easy", lambda ts: None, False)
    merged = first.merged(second)
    assert sorted({t.group for t in merged.trajectories}) == list(range(6 + 3))
    assert merged.groups_generated == 9 and merged.extra == {**first.extra, **second.extra}
    empty = Collected([], 0.0, 0, 0, 0, 0)
    assert empty.merged(first).trajectories[0].group == 0


def test_the_pool_of_distinct_proposals_is_kept_across_steps_and_restored():
    game = _game(TEXTS, SOLVED)
    game.collect(np.random.default_rng(0), lambda name: "easy", lambda ts: None, dynamic_sampling=False)
    state = json.loads(json.dumps(game.state_dict()))
    fresh = _game([["<answer>7*1*1=7</answer>"]], {7: 2})
    fresh.load_state_dict(state)
    collected = fresh.collect(np.random.default_rng(0), lambda name: "easy", lambda ts: None, dynamic_sampling=False)
    assert collected.extra["selfplay/pool_size"] == 4.0


# --- config ---------------------------------------------------------------------------------------------------

BASE = {
    "tasks": ["expression_evaluation", "propose_expression"],
    "selfplay": {"enabled": True},
    "rl": {"prompts_per_step": 0},
}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"selfplay": {"enabled": True, "proposer": "addition"}}, "'addition' is not a proposer task"),
        ({"selfplay": {"enabled": True, "proposer": "propose_expresion"}}, "did you mean propose_expression"),
        ({"tasks": ["expression_evaluation"]}, "the proposer task 'propose_expression' is not in tasks"),
        ({"tasks": ["propose_expression"]}, "the solver task 'expression_evaluation' is not in tasks"),
        ({"selfplay": {"enabled": True, "reward": "entropy"}}, "selfplay.reward"),
        ({"selfplay": {"enabled": True, "proposals": 1}}, "selfplay.proposals"),
        ({"selfplay": {"enabled": True, "solver_group_size": 1}}, "selfplay.solver_group_size"),
        ({"selfplay": {"enabled": True, "invalid_reward": -1.5}}, "invalid_reward must be between -1 and 0, got -1.5"),
        ({"selfplay": {"enabled": True, "invalid_reward": 0.5}}, "invalid_reward must be between -1 and 0, got 0.5"),
        ({"selfplay": {"enabled": False}}, "rl.prompts_per_step is 0"),
        ({"backend": "ray"}, "cannot be combined with backend=ray"),
    ],
)
def test_config_errors_are_one_line(change, message):
    from polyrl.train.config import load_config

    with pytest.raises(UserError, match=message) as info:
        load_config(None, base={**BASE, **change})
    assert "\n" not in str(info.value)


def test_fsdp_refuses_selfplay():
    from polyrl.train.config import load_config
    from polyrl.train.fsdp_trainer import check_fsdp_config

    with pytest.raises(UserError, match="cannot run self-play"):
        check_fsdp_config(load_config(None, base=BASE))


def test_the_shipped_config_loads():
    from polyrl.train.config import load_config

    cfg = load_config(Path(__file__).parents[2] / "configs" / "selfplay.yaml")
    assert cfg.selfplay.enabled and cfg.rl.prompts_per_step == 0
    assert {t.name for t in cfg.tasks} == {"expression_evaluation", "propose_expression"}


# --- training runs on the tiny model --------------------------------------------------------------------------


def _run(tiny_train_config, steps=2, **updates):
    """A Trainer for a seconds-long self-play run: 2 proposer prompts x 4 proposals, 3 solver completions each,
    and one generated solver problem per step."""
    from polyrl.train.trainer import Trainer

    rl = {**tiny_train_config().rl.model_dump(), "steps": steps, "prompts_per_step": 1, "dynamic_sampling": False}
    settings = {
        "tasks": [{"name": "expression_evaluation", "difficulty": "easy"}, {"name": "propose_expression"}],
        "selfplay": {"enabled": True, "prompts": 2, "proposals": 4, "solver_group_size": 3, "max_new_tokens": 24},
        "rl": rl,
        "sft": {"steps": 2, "batch_size": 4},
        "eval": {"problems_per_task": 2, "pass_k": 1},
        "checkpoint_every": 2,
    }
    cfg = tiny_train_config(**{**settings, **updates})
    return cfg, Trainer(cfg)


def _records(cfg):
    lines = (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("stage") == "rl"]


def test_an_untrained_proposer_writes_junk_that_is_counted_not_a_crash(tiny_train_config):
    cfg, trainer = _run(tiny_train_config)
    results = trainer.run()
    assert set(results["after_rl"]) >= {"expression_evaluation", "propose_expression"}
    rl = _records(cfg)
    assert len(rl) == 2
    for r in rl:
        assert r["selfplay/proposals"] == 8.0
        assert r["selfplay/invalid"] == 8.0 - 8.0 * r["role/proposer/valid"]
        reasons = sum(v for k, v in r.items() if k.startswith("selfplay/invalid/"))
        assert reasons == r["selfplay/invalid"]
        assert r["source/generated"] > 0  # the one generated solver problem per step, and the proposer's prompts


class ReferenceProposals:
    """Wraps the trainer's backend: proposer prompts get the task's reference proposal (a valid one) as their
    completion, everything else is sampled from the policy — so a 2-step run has proposed problems to solve."""

    def __init__(self, backend, tokenizer, references):
        self.backend, self.tok, self.references = backend, tokenizer, references

    def generate(self, prompts, **kwargs):
        from polyrl.policy.generation import Generation

        out = self.backend.generate(prompts, **kwargs)
        for k, ids in enumerate(prompts):
            text = self.tok.decode(ids, skip_special_tokens=True)
            for question, reference in self.references.items():
                if question in text:
                    completion = self.tok(reference, add_special_tokens=False).input_ids + [self.tok.eos_token_id]
                    out[k] = Generation(list(ids), completion, reference, True)
        return out

    def __getattr__(self, name):
        return getattr(self.backend, name)


def test_a_two_step_run_trains_both_roles_and_reports_them(tiny_train_config):
    cfg, trainer = _run(tiny_train_config)
    assert len({PROPOSER.generate(seed, "easy").question for seed in range(200)}) == 2 * 10  # every easy prompt
    _scripted(trainer)
    trainer.run()
    rl = _records(cfg)
    for r in rl:
        assert r["role/proposer/valid"] == 1.0 and r["selfplay/invalid"] == 0.0
        assert r["role/solver/problems"] == 8.0
        assert 0.0 <= r["role/solver/accuracy"] <= 1.0
        assert r["source/proposed"] == pytest.approx(8 * 3 / (8 * 3 + 8 + 4))  # of the step's completions
        assert "accuracy/propose_expression" in r and "reward/expression_evaluation" in r
    assert rl[-1]["selfplay/pool_size"] >= rl[0]["selfplay/pool_size"] > 0
    from polyrl.train.checkpoint import latest_checkpoint

    ckpt = latest_checkpoint(Path(cfg.run_dir) / "checkpoints")
    assert len(ckpt.state["selfplay"]["pool"]) == rl[-1]["selfplay/pool_size"]
    from polyrl.report.html import build_report

    page, pngs = build_report(cfg.run_dir)
    text = page.read_text()
    assert any(p.name.endswith("_selfplay.png") for p in pngs)
    assert any(p.name.endswith("_sources.png") for p in pngs)
    assert "<h2>Self-play</h2>" in text and 'id="proposals"' in text
    assert "proposed by the policy in self-play" in text


def test_a_run_without_selfplay_has_no_selfplay_section(tmp_path):
    from polyrl.report.html import build_report

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("tasks: [{name: addition}]\n")
    records = [{"stage": "rl", "step": s, "reward": 0.5, "source/generated": 1.0} for s in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    page, pngs = build_report(run)
    assert "Self-play" not in page.read_text()
    assert not any(p.name.endswith("_selfplay.png") for p in pngs)


def test_invalid_reasons_count_0_on_the_steps_they_were_not_logged(tmp_path, monkeypatch):
    """A reason is logged only on steps that had one (``selfplay/invalid/<reason>``); the plot draws 0 on the other
    game steps rather than joining the logged ones (which drew a reason seen once as a flat line at 1)."""
    from polyrl.report import plots, series
    from polyrl.report.panels import selfplay_panels

    rl = [
        {"stage": "rl", "step": 1, "selfplay/proposals": 8.0, "role/proposer/valid": 0.5, "selfplay/invalid/x": 4.0},
        {"stage": "rl", "step": 2, "selfplay/proposals": 8.0, "role/proposer/valid": 1.0},
        {"stage": "rl", "step": 3, "selfplay/proposals": 8.0, "role/proposer/valid": 0.75, "selfplay/invalid/x": 2.0},
        {"stage": "rl", "step": 4, "role/proposer/valid": 0.75},  # not a game step: no count
    ]
    assert series.counts(rl, "selfplay/invalid/x", "selfplay/proposals") == ([1, 2, 3], [4.0, 0.0, 2.0])
    (panel,) = [p for p in selfplay_panels(rl) if p.title.startswith("invalid proposals")]
    assert panel.zero_fill == "selfplay/proposals"
    drawn = []
    monkeypatch.setattr(plots, "_noisy", lambda ax, steps, ys, *a, **k: drawn.append((list(steps), list(ys))))
    plots.overlay_curves(rl, [panel])
    assert drawn == [([1, 2, 3], [4.0, 0.0, 2.0])]


def _scripted(trainer):
    references = {}
    for seed in range(200):
        p = PROPOSER.generate(seed, "easy")
        references[p.question] = PROPOSER.reference_response(p)
    for source in (trainer.parts.selfplay.proposers, trainer.parts.selfplay.solvers):
        source.backend = ReferenceProposals(trainer.parts.backend, trainer.parts.policy.tokenizer, references)
    return trainer


def test_a_resumed_selfplay_run_matches_the_uninterrupted_one(tiny_train_config, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from polyrl.run_dir import RunDir
    from polyrl.train.trainer import Trainer

    def run_dir(name):
        return {"run_dir": str(tmp_path / name), "checkpoint_every": 1, "steps": 3}

    full_cfg, full = _run(tiny_train_config, **run_dir("full"))
    _scripted(full).run()

    cfg, crashed = _run(tiny_train_config, **run_dir("crashed"))
    real_log = RunDir.log

    def crashing_log(self, record):
        real_log(self, record)
        if record["stage"] == "rl" and record["step"] == 2:
            raise RuntimeError("killed")

    monkeypatch.setattr(RunDir, "log", crashing_log)
    with pytest.raises(RuntimeError, match="killed"):
        _scripted(crashed).run()
    monkeypatch.setattr(RunDir, "log", real_log)
    _scripted(Trainer(cfg, resume=True)).run()

    weights = [load_file(str(Path(c.run_dir) / "final_model" / "model.safetensors")) for c in (full_cfg, cfg)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    drop = ("step_time", "tokens_per_s", "completions_per_s")
    strip = lambda rs: [{k: v for k, v in r.items() if k not in drop} for r in rs]
    assert strip(_records(cfg)) == strip(_records(full_cfg))  # pool sizes and proposals included


def test_the_pool_eval_script_reads_a_runs_pool_as_solver_problems(tmp_path):
    """scripts/selfplay_pool_eval.py (docs/synthesis.md's fixed-pool measure) turns the checkpointed pool into
    expression_evaluation problems with their exact values."""
    import importlib.util

    path = Path(__file__).parents[2] / "scripts" / "selfplay_pool_eval.py"
    spec = importlib.util.spec_from_file_location("selfplay_pool_eval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ckpt = tmp_path / "checkpoints" / "rl-000002"
    ckpt.mkdir(parents=True)
    (tmp_path / "checkpoints" / "LATEST").write_text("rl-000002\n")
    (ckpt / "trainer_state.json").write_text(json.dumps({"selfplay": {"pool": ["7*(2+3)=", "(6+9)*0=", "8-9="]}}))
    name, problems = module.pool_problems(tmp_path, None)
    assert name == "rl-000002"
    assert [(p.question, p.source, v) for p, v in problems] == [
        ("7*(2+3)=", "proposed", 35),
        ("(6+9)*0=", "proposed", 0),
        ("8-9=", "proposed", -1),
    ]
    assert all(SOLVER.verify(p, f"<answer>{v}</answer>").correct for p, v in problems)


def test_the_compare_script_reads_a_runs_metrics_and_pool(tmp_path):
    """scripts/selfplay_compare.py (docs/synthesis.md's invalid_reward comparison) on a hand-made run."""
    import importlib.util

    path = Path(__file__).parents[2] / "scripts" / "selfplay_compare.py"
    spec = importlib.util.spec_from_file_location("selfplay_compare", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    examples = [
        {"proposal": "0*(4+2)=0", "valid": True, "solver_success": 1.0},
        {"proposal": "7+2*3=13", "valid": True, "solver_success": 0.5},
        {"proposal": "8*8=42", "valid": False, "solver_success": None},
        {"proposal": "9-9=0", "valid": True, "solver_success": 0.75},
    ]
    records = [{"stage": "sft", "step": 1, "loss": 1.0}]
    for step in range(1, 51):  # steps 1-25: valid 0.25, learnability 0.4; steps 26-50: valid 0.5, no valid, no update
        late = step > 25
        rec = {"stage": "rl", "step": step, "role/proposer/valid": 0.5 if late else 0.25, "selfplay/pool_size": step}
        rec["selfplay/examples"] = examples[:3] if late else examples
        if not late:
            rec.update({"role/proposer/learnability": 0.4, "role/solver/accuracy": 0.6, "trained_sequences": 40})
        records.append(rec)
    records.append(
        {
            "stage": "eval",
            "name": "after_rl",
            "accuracy/expression_evaluation": 0.25,
            "accuracy/propose_expression": 0.5,
        }
    )
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    ckpt = tmp_path / "checkpoints" / "rl-000050"
    ckpt.mkdir(parents=True)
    (tmp_path / "checkpoints" / "LATEST").write_text("rl-000050\n")
    (ckpt / "trainer_state.json").write_text(json.dumps({"selfplay": {"pool": ["0*5=", "7+2=", "3-3=", "8="]}}))
    m = module.run_metrics(tmp_path)
    assert (m["valid, steps 1-25"], m["valid, last 25 steps"]) == (0.25, 0.5)
    assert m["learnability of all (no penalty), 1-25"] == pytest.approx(0.1)
    assert m["learnability of all (no penalty), last 25"] == 0.0  # no valid proposal's learnability logged
    assert m["value-0 share of logged valid, all steps"] == pytest.approx((25 * 2 + 25 * 1) / (25 * 3 + 25 * 2))
    assert m["value-0 share of logged valid, last 50"] == m["value-0 share of logged valid, all steps"]
    assert m["valid with value != 0, share of logged proposals, last 50"] == pytest.approx(50 / (25 * 4 + 25 * 3))
    assert m["solver success on logged valid value != 0, first 50"] == 0.5
    assert m["value-0 share of the final pool"] == 0.5
    assert (m["steps with no update"], m["pool after RL"]) == (25.0, 50)
    assert m["held-out expression_evaluation, after_rl"] == 0.25
    assert module.mean_ci([1.0, 2.0, 3.0]) == "2.000 ± 2.483"  # t = 4.30, sd 1, n 3
