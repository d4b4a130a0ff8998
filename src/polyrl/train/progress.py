"""Live progress in the terminal (rich), or a plain line every few steps when output is not a terminal."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class StageProgress:
    def __init__(self, enabled: bool = True, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.live = enabled and self.console.is_terminal
        self.enabled = enabled
        self._progress: Progress | None = None
        self._task = None
        self._total = 0

    def start(self, stage: str, total: int, done: int = 0) -> None:
        self.stop()
        self._total = total
        self._stage = stage
        if self.live:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[info]}"),
                console=self.console,
            )
            self._progress.start()
            self._task = self._progress.add_task(stage, total=total, completed=done, info="")

    def update(self, step: int, info: dict[str, float]) -> None:
        # a value a step could not measure (entropy when no group had a reward spread: nothing was trained) is NaN
        text = "  ".join(f"{k} {v:.3g}" if v == v else f"{k} —" for k, v in info.items())
        if self._progress is not None:
            self._progress.update(self._task, completed=step, info=text)
        elif self.enabled and (step % max(1, self._total // 10) == 0 or step == self._total):
            print(f"[{self._stage}] step {step}/{self._total}  {text}", file=sys.stderr, flush=True)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
