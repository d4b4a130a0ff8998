"""``benchmarks/gpu_check.sh`` runs on a CPU too (``GPU_CHECK_DEVICE=cpu``, small sizes): the script that checks a
GPU machine is exercised here, where no GPU is, so that it works the first time it meets one (issue #34)."""

import os
import subprocess
import sys
from pathlib import Path

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
    assert any(line.startswith("SKIP vllm: vLLM is not installed") for line in lines) or any(
        line.startswith("PASS vllm") for line in lines
    )
    assert (tmp_path / "out" / "speed.json").is_file() and (tmp_path / "out" / "packed_check.json").is_file()
