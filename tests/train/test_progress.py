"""The plain progress line (output not a terminal): every tenth of the stage, unmeasured values as a dash."""

from polyrl.train.progress import StageProgress


def test_plain_lines_show_an_unmeasured_value_as_a_dash(capsys):
    progress = StageProgress(enabled=True)
    progress.start("rl", total=10)
    progress.update(1, {"reward": 0.25, "accuracy": 0.5, "entropy": float("nan")})
    progress.update(2, {"reward": 0.125, "entropy": 1.2345})
    progress.stop()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "[rl] step 1/10  reward 0.25  accuracy 0.5  entropy —",
        "[rl] step 2/10  reward 0.125  entropy 1.23",
    ]
