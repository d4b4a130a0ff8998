"""HTML reports of training runs: curves per task, curriculum, held-out results, the resolved config."""

from polyrl.report.html import build_report

__all__ = ["build_report"]
