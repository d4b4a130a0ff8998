"""``benchmarks/gpu_check.sh`` runs on a CPU too (``GPU_CHECK_DEVICE=cpu``, small sizes): the script that checks a
GPU machine is exercised here, where no GPU is, so that it works the first time it meets one (issue #34)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHECKS = ("default", "packed", "packed_train", "fsdp", "memory", "speed")


def test_the_gpu_check_runs_every_check_on_a_cpu_and_skips_vllm_with_the_reason(tmp_path):
    env = {
        **os.environ,
        "GPU_CHECK_DEVICE": "cpu",
        "GPU_CHECK_OUT": str(tmp_path / "out"),
        "PYTHON": sys.executable,
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_check.sh")], env=env, capture_output=True, text=True, timeout=900
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for check in CHECKS:
        assert any(line.startswith(f"PASS {check} (") for line in lines), (check, done.stdout[-2000:])
    assert "SKIP vllm: vLLM runs on CUDA only (GPU_CHECK_DEVICE=cpu)" in lines
    assert (tmp_path / "out" / "speed.json").is_file() and (tmp_path / "out" / "packed_check.json").is_file()


@pytest.mark.parametrize("spec", ["garbage", "cuda:7", "mps", "cuda:\u0663", "cuda:99999999999999999999"])
def test_the_gpu_check_refuses_a_device_it_cannot_use_before_any_check_runs(spec, tmp_path):
    """Issue #43: ``GPU_CHECK_DEVICE=garbage`` ran every check, printed tracebacks and reported ``PASS memory``
    (which had run on the CPU)."""
    env = {**os.environ, "GPU_CHECK_DEVICE": spec, "GPU_CHECK_OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_check.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpu_check: GPU_CHECK_DEVICE={spec!r}: "), err
    assert not any((tmp_path / "out" / f"{check}.log").exists() for check in CHECKS)


@pytest.mark.parametrize(
    "script", [["memory.py"], ["packed_check.py"], ["gpu_throughput.py", "--model", "unused"]], ids=lambda s: s[0]
)
def test_each_benchmark_the_gpu_check_runs_refuses_a_device_name_in_one_line(script, tmp_path):
    """The Python entry points read ``--device`` with polyrl's one parser: one line and exit code 2, no
    traceback, before anything is built or written."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script[0]), *script[1:], "--device", "cuda:\u0663"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr
    assert err[0].endswith(
        "error: --device: device 'cuda:\u0663': give auto, cpu, cuda, cuda:N (N from 0 to 127) or mps"
    )
    assert list(tmp_path.iterdir()) == []
