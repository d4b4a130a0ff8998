"""``benchmarks/gpu_check.sh`` runs on a CPU too (``GPU_CHECK_DEVICE=cpu``, small sizes): the script that checks a
GPU machine is exercised here, where no GPU is, so that it works the first time it meets one (issue #34), within
the limits of the machine it is lent for (issue #42: every check in one call of at most 8 minutes, results where the
caller says)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.sh"
PARTS = {
    "lent": ("speed", "default", "packed", "memory", "fsdp", "packed_train"),
    "speed": ("speed", "packed", "packed_train"),
    "rest": ("default", "memory", "fsdp"),
    "vllm": (),
    "vlm": ("hf_vlm",),
}
"""Each part's checks in the order they start. ``lent`` is every check but vLLM's (absent from a lent machine), in
the one call a lent machine's 15 minutes of device time leave room for; ``speed`` and ``rest`` the same checks with
more time each, for a machine held longer; ``vlm`` (Hugging Face vision-language policies) a short call of its own."""
VLM_CALL = 180
"""The seconds of the one call docs/gpu.md gives the ``vlm`` part (``timeout_s``)."""
FILES_BACK = 8
"""Files a lent machine sends back from $OUT after one command (/work/.library/device/README.md)."""


def _check(*parts: str, out: Path | None, timeout: float = 1800, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPU_CHECK_DEVICE": "cpu", "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", **env}
    env.pop("OUT", None)
    env.pop("GPU_CHECK_OUT", None)
    if out is not None:
        env["GPU_CHECK_OUT"] = str(out)
    return subprocess.run(["bash", str(SCRIPT), *parts], env=env, capture_output=True, text=True, timeout=timeout)


def test_the_gpu_check_runs_every_check_in_one_call_on_a_cpu_writing_what_one_call_can_send_back(tmp_path):
    """The call a lent machine gets, on a CPU: every check passes (the default job beside the others), and the
    results directory holds fewer files than a call sends back: the part's lines, one log, each check's results."""
    out = tmp_path / "lent"
    done = _check("lent", out=out)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert lines[0].startswith("gpu_check lent: cpu torch "), lines[0]
    for check in PARTS["lent"]:
        assert any(line.startswith(f"PASS {check} (") for line in lines), (check, done.stdout[-2000:])
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["lent.txt", "lent.log", "speed.json", "packed_check.json", "default.md", "memory.md"]
    )
    assert len(list(out.iterdir())) < FILES_BACK
    assert (out / "lent.txt").read_text().splitlines()[0] == lines[0]
    logged = [line.removeprefix("=== ") for line in (out / "lent.log").read_text().splitlines() if line[:4] == "=== "]
    assert sorted(logged) == sorted(PARTS["lent"])
    speed = json.loads((out / "speed.json").read_text())
    assert speed["done"] and speed["greedy_equal"] == "2/2"
    assert json.loads((out / "packed_check.json").read_text())["ok"]
    assert "| **mean** |" in (out / "default.md").read_text()


def test_the_vllm_part_says_why_it_skips_on_a_cpu(tmp_path):
    done = _check("vllm", out=tmp_path / "vllm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SKIP vllm: vLLM runs on CUDA only (GPU_CHECK_DEVICE=cpu)" in done.stdout.splitlines()


def _plan() -> dict:
    done = subprocess.run(["bash", str(SCRIPT), "--plan"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    plan: dict = {"checks": {}}
    for line in done.stdout.splitlines():
        word, *rest = line.split()
        if word == "check":
            part, name, seconds, *background = rest
            plan["checks"].setdefault(part, {})[name] = (int(seconds), background == ["background"])
        elif word == "part_budget":
            plan.setdefault("part_budget", {})[rest[0]] = int(rest[1])
        else:
            plan[word] = int(rest[0])
    return plan


def _longest_path(checks: dict) -> int:
    """Seconds a part's checks can take: one after another, except that a background check runs beside every check
    after it."""
    total, beside = 0, 0
    for seconds, background in checks.values():
        if background:
            beside = max(beside, seconds)
        elif beside:
            beside -= min(beside, seconds)
            total += seconds
        else:
            total += seconds
    return total + beside


def test_each_part_of_the_gpu_check_fits_one_command_on_a_lent_machine():
    """Issue #42: the checks' limits added to 660 s before setup against a 600 s command limit. Each part's setup
    and checks fit its budget, and the budget leaves two minutes of the limit (at most 8 minutes a call); the
    speed goal is measured first, alone."""
    plan = _plan()
    assert plan["command_limit"] == 600 and plan["budget"] <= 8 * 60 <= plan["command_limit"] - 120
    assert {part: tuple(checks) for part, checks in plan["checks"].items()} == {
        part: checks or ("vllm",) for part, checks in PARTS.items()
    }
    for part, checks in plan["checks"].items():
        budget = plan["part_budget"].get(part, plan["budget"])
        assert plan["setup"] + _longest_path(checks) <= budget <= plan["budget"], (part, checks)
    assert plan["part_budget"]["vlm"] <= VLM_CALL - 10, "the vlm part fits its call with 10 s to spare"
    assert next(iter(plan["checks"])) == "lent"
    for checks in plan["checks"].values():
        first, *_ = checks.items()
        if "speed" in checks:
            assert first == ("speed", (checks["speed"][0], False))


def test_a_background_check_counts_beside_the_checks_after_it():
    assert _longest_path({"a": (100, False), "b": (200, True), "c": (50, False), "d": (80, False)}) == 300
    assert _longest_path({"a": (100, False), "b": (50, True), "c": (80, False)}) == 180


def test_a_part_skips_the_checks_its_budget_has_no_time_left_for(tmp_path):
    done = _check("speed", out=tmp_path / "out", GPU_CHECK_BUDGET="1", GPU_CHECK_CPU_SLOWER="1")
    assert done.returncode == 0, done.stdout + done.stderr
    for check in PARTS["speed"]:
        assert f"SKIP {check}: this call's budget (1 s) is spent" in done.stdout.splitlines()
    assert not list((tmp_path / "out").glob("*.log"))


def test_the_gpu_check_asks_for_a_results_directory_before_anything_runs(tmp_path):
    """Without one, its results stayed in the tree, which a lent machine does not send back (issue #42)."""
    done = _check("speed", out=None)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "gpu_check: name the directory for the results: GPU_CHECK_OUT=DIR (on a lent GPU machine, $OUT)"
    ]


def test_the_gpu_check_refuses_a_part_it_does_not_have(tmp_path):
    done = _check("speeed", out=tmp_path / "out")
    assert done.returncode == 2 and done.stdout == "" and not (tmp_path / "out").exists()
    assert (
        done.stderr.strip()
        == "gpu_check: unknown part 'speeed'; give one or more of: lent speed rest vllm vlm (or --plan)"
    )


@pytest.mark.parametrize("spec", ["garbage", "cuda:7", "mps", "cuda:\u0663", "cuda:99999999999999999999"])
def test_the_gpu_check_refuses_a_device_it_cannot_use_before_any_check_runs(spec, tmp_path):
    """Issue #43: ``GPU_CHECK_DEVICE=garbage`` ran every check, printed tracebacks and reported ``PASS memory``
    (which had run on the CPU)."""
    done = _check(out=tmp_path / "out", timeout=300, GPU_CHECK_DEVICE=spec)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpu_check: GPU_CHECK_DEVICE={spec!r}: "), err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


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


def test_the_vlm_part_runs_its_check_on_a_cpu_and_writes_three_files(tmp_path):
    """The Hugging Face vision-language check (``benchmarks/vlm_check.py --small``) as its own call: it passes for
    both shapes in bf16 autocast and sends back the part's lines, its log and the check's JSON."""
    out = tmp_path / "vlm"
    done = _check("vlm", out=out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert any(line.startswith("PASS hf_vlm (") for line in done.stdout.splitlines()), done.stdout[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["vlm.log", "vlm.txt", "vlm_check.json"]
    result = json.loads((out / "vlm_check.json").read_text())
    assert result["done"] and result["ok"] and set(result["models"]) == {"smolvlm-256m", "qwen2-vl-2b"}
    assert {m["autocast"] for m in result["models"].values()} == {"bf16"}
