"""benchmarks/bf16_logprobs.py: polyrl's bf16 generation and training log-probs held against float32, beside the
model's own Hugging Face forward under ``torch.autocast`` (TRL's numbers on a CPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


@pytest.fixture()
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bf16_logprobs

    return bf16_logprobs


def test_polyrls_bf16_logprobs_are_as_close_to_float32_as_hugging_faces_autocast(bench, tmp_path):
    """On the tiny model, every task's completion tokens are scored four ways; polyrl's own bf16 forwards (the
    cached decode that samples, the packed training forward) stay within twice the error of the Hugging Face
    forward under autocast — a forward of polyrl's that dropped to bf16 where transformers keeps float32 (a
    residual stream, a norm, the log-softmax) would be several times further off. So does the gradient of a
    policy-gradient loss through polyrl's training forward."""
    out = tmp_path / "bf16.json"
    result = bench.main(["--problems", "2", "--group-size", "2", "--max-new-tokens", "6", "--json", str(out)])
    assert json.loads(out.read_text())["figures"] == result["figures"]
    figures = result["figures"]
    assert "all" in figures and len(figures) >= 2
    for task, row in figures.items():
        assert row["tokens"] > 0, task
        hf = row["hf_autocast"]["mean_abs"]
        assert 0 < hf < 0.1, task  # bf16 differs from float32, by rounding only
        for column in ("behaviour", "training"):
            assert math.isfinite(row[column]["mean_abs"]), (task, column)
            assert row[column]["mean_abs"] <= 2 * hf + 1e-3, (task, column, row[column]["mean_abs"], hf)
    grads = result["gradients"]
    assert 0 < grads["hf_autocast"]["relative_error"] < 0.2
    assert grads["training"]["relative_error"] <= 2 * grads["hf_autocast"]["relative_error"] + 1e-3
    assert grads["training"]["cosine"] > 0.98 and 0.8 < grads["training"]["norm_ratio"] < 1.2


def test_a_non_positive_size_is_refused_in_one_line(bench, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--problems", "0"])
    assert exit_info.value.code == 2
    assert "--problems must be at least 1, got 0" in capsys.readouterr().err
