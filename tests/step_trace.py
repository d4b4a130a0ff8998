"""The files of ``src/polyrl`` one RL step runs, in the order data first reaches them (docs/architecture.md's table).

``python tests/step_trace.py`` builds the embedded default job (configs/default.yaml) at small sizes, without SFT,
and profiles every call made inside ``RLStage.step`` on every thread (``sys.setprofile`` and
``threading.setprofile``) for two steps, each of which updates (dynamic sampling off, zero-advantage rows kept);
it prints one path a line, relative to ``src/polyrl``. Left out: task implementations (``tasks/builtin/``: the mix
decides which run) and what an import the step happens to make first runs (module bodies and what they call). It runs in a process of
its own (``tests/test_architecture_trace.py``), so that nothing an earlier test cached or imported changes what
the step calls.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2}
"""The tiny model at a quarter of its width: the step runs the same code in less time."""
STEPS = 2


def default_job(run_dir: str) -> dict:
    """configs/default.yaml at small sizes: no SFT, ``STEPS`` RL steps of 4 prompts × 4 that each update."""
    config = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text())
    config["model"]["tiny"] = SMALL
    return {
        **config,
        "seed": 0,
        "run_dir": run_dir,
        "progress": False,
        "sft": {"enabled": False},
        "rl": {
            "steps": STEPS,
            "prompts_per_step": 4,
            "group_size": 4,
            "max_new_tokens": 16,
            "dynamic_sampling": False,
            "skip_zero_advantage": False,
        },
        "eval": {"problems_per_task": 1},
    }


class FirstCalls:
    """The ``src/polyrl`` files whose code is called, in the order of their first call (a profile function for
    ``sys.setprofile`` and ``threading.setprofile``). Calls made while a module is being imported (its body and
    everything the body calls: decorators, class definitions) are not the step's and are left out."""

    def __init__(self, package: Path, left_out: tuple[Path, ...]):
        self.package, self.left_out = package, left_out
        self.order: list[str] = []
        self._files: dict[str, str] = {}
        self._lock = threading.Lock()
        self._importing = threading.local()

    def _relative(self, filename: str) -> str:
        path = Path(filename).resolve()
        inside = path.is_relative_to(self.package) and not any(path.is_relative_to(p) for p in self.left_out)
        return str(path.relative_to(self.package)) if inside else ""

    def __call__(self, frame, event, arg) -> None:
        if event not in ("call", "return"):
            return
        depth = getattr(self._importing, "depth", 0)
        if frame.f_code.co_name == "<module>":
            self._importing.depth = depth + (1 if event == "call" else -1)
            return
        if event == "return" or depth:
            return
        filename = frame.f_code.co_filename
        rel = self._files.get(filename)
        if rel is None:
            rel = self._files[filename] = self._relative(filename)
        if rel and rel not in self.order:
            with self._lock:
                if rel not in self.order:
                    self.order.append(rel)


def traced_files() -> tuple[list[str], list[int]]:
    """The files the RL steps ran, in first-call order, and each step's optimizer updates."""
    import polyrl
    from polyrl.train.config import TrainConfig
    from polyrl.train.trainer import Trainer

    package = Path(polyrl.__file__).resolve().parent
    calls = FirstCalls(package, (package / "tasks" / "builtin",))
    updates: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(TrainConfig(**default_job(str(Path(tmp) / "run"))))
        step = trainer.rl.step

        def traced_step(*args):
            threading.setprofile(calls)
            sys.setprofile(calls)
            try:
                metrics = step(*args)
            finally:
                sys.setprofile(None)
                threading.setprofile(None)
            updates.append(metrics.get("updates", 0))
            return metrics

        trainer.rl.step = traced_step
        trainer.rl.run(None)
    return calls.order, updates


if __name__ == "__main__":
    files, updates = traced_files()
    if not all(updates) or len(updates) != STEPS:
        sys.exit(f"every traced step must update; updates per step: {updates}")
    print("\n".join(files))
