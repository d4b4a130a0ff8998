"""benchmarks/learning_curves.py (``vs_trl.py --eval-every``): evaluations during RL stamped with training time
only, time to accuracy, and the tables of polyrl vs TRL where RL learns, with hand-computed numbers."""

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def lc(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import learning_curves

    return learning_curves


def test_an_evaluation_is_stamped_with_training_time_and_its_own_time_is_excluded(lc, monkeypatch):
    clock = iter([110.0, 110.0, 130.0, 150.0, 150.0, 151.0])
    monkeypatch.setattr(lc.time, "perf_counter", lambda: next(clock))
    curve = lc.Curve(start=100.0)
    result = {"mean": {"accuracy": 0.4}}
    curve.evaluated(10, lambda: result)  # stamp 110 - 100 = 10 s; the evaluation runs 110 -> 130
    curve.evaluated(20, lambda: result, probe_seconds=5.0)  # stamp 150 - 100 - 20 - 5 = 25 s; eval 150 -> 151
    assert curve.points == [(10, 10.0, 0.4), (20, 25.0, 0.4)]
    assert curve.excluded == pytest.approx(21.0)


def test_time_to_accuracy_is_the_first_evaluation_at_the_threshold(lc):
    points = [(10, 60.0, 30.0), (20, 120.0, 36.0), (30, 180.0, 34.0)]
    assert lc.time_to_accuracy(points, 35.0) == (20, 120.0)
    assert lc.time_to_accuracy(points, 36.0) == (20, 120.0)
    assert lc.time_to_accuracy(points, 40.0) is None


def _seed(seed, sft, ours, theirs, walls):
    row = lambda a: {"t": {"accuracy": a}, "mean": {"accuracy": a}}
    return {
        "seed": seed,
        "sft": row(sft),
        "eval_problems": 100,
        "polyrl": {"accuracy": row(ours[-1][2]), "curve": {"points": ours}, "wall": walls[0], "cpu": walls[0]},
        "trl": {"accuracy": row(theirs[-1][2]), "curve": {"points": theirs}, "wall": walls[1], "cpu": walls[1]},
    }


def test_the_learning_report_by_hand(lc):
    results = [
        _seed(0, 0.30, [(10, 60, 0.33), (20, 120, 0.36)], [(10, 300, 0.31), (20, 600, 0.35)], (120, 600)),
        _seed(1, 0.40, [(10, 60, 0.44), (20, 120, 0.46)], [(10, 300, 0.40), (20, 600, 0.42)], (120, 480)),
    ]
    tables, verdict = lc.learning_report(results, 10, 5.0)
    during, tta, after, speed = tables
    assert during[2][1][:3] == [
        "20",
        "41.0 [-22.5, 104.5]",
        "38.5 [-6.0, 83.0]",
    ]  # means 41, 38.5; SE 5.0, 3.5; t 12.706
    # seed 0: threshold 35 -> polyrl at step 20 (2.0 min), TRL at step 20 (10.0 min); seed 1: 45 -> polyrl only
    assert tta[2][0] == ["0", "30.0%", "35.0%", "step 20, 2.0 min", "step 20, 10.0 min", "5.00×"]
    assert tta[2][1] == ["1", "40.0%", "45.0%", "step 20, 2.0 min", "not reached", "–"]
    assert after[2][-1][1] == "+2.5 [-16.6, +21.6]"  # polyrl − TRL at the end: +1 and +4 points
    assert speed[2][0][1] == "4.50 [-1.85, 10.85]×"  # ratios 5.0 and 4.0: SE 0.5, t 12.706
    assert "polyrl in 2/2 seeds, TRL in 1/2" in verdict and "TRL / polyrl: 5.00× over 1 seed(s)" in verdict
    assert "polyrl +6.0 points" in verdict or "polyrl +6.0 [" in verdict  # gains 6 and 6


def _run_file(path: Path, seeds: list[int], setup: str = "90 RL steps; held-out: 50 problems; {seeds}precision: bf16"):
    seeds_part = f"seeds {', '.join(map(str, seeds))}; "
    results = [{"seed": s, "sft": {"mean": {"accuracy": 0.3}}} for s in seeds]
    path.write_text(json.dumps({"setup": setup.format(seeds=seeds_part), "machine": "cpu", "results": results}))
    return str(path)


def test_merged_runs_put_seeds_run_apart_in_seed_order(lc, tmp_path):
    a = _run_file(tmp_path / "a.json", [2, 1])
    b = _run_file(tmp_path / "b.json", [0])
    results, machines, setup = lc.merged_runs([a, b])
    assert [r["seed"] for r in results] == [0, 1, 2]
    assert machines == ["cpu", "cpu"]
    assert setup == "90 RL steps; held-out: 50 problems; precision: bf16"


def test_merged_runs_refuse_a_seed_found_twice(lc, tmp_path):
    a, b = _run_file(tmp_path / "a.json", [0, 1]), _run_file(tmp_path / "b.json", [1])
    with pytest.raises(SystemExit, match=r"seed\(s\) 1 found in more than one file"):
        lc.merged_runs([a, b])


def test_merged_runs_refuse_files_of_another_setup(lc, tmp_path):
    a = _run_file(tmp_path / "a.json", [0])
    b = _run_file(tmp_path / "b.json", [1], setup="8 RL steps; held-out: 50 problems; {seeds}precision: bf16")
    with pytest.raises(SystemExit, match="ran another setup"):
        lc.merged_runs([a, b])


def test_merged_runs_refuse_a_file_that_is_not_a_run(lc, tmp_path):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(SystemExit, match=r"is not a vs_trl\.py --json file"):
        lc.merged_runs([str(tmp_path / "x.json")])
    with pytest.raises(SystemExit, match=r"is not a vs_trl\.py --json file"):
        lc.merged_runs([str(tmp_path / "missing.json")])
