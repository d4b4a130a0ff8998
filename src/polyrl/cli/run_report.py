"""``polyrl report``: a self-contained HTML page for a run directory."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def report(
        run_dir: Path = typer.Argument(..., help="A polyrl run directory (finished or still running)."),
        out: Path | None = typer.Option(None, "--out", help="HTML file to write (default: RUN_DIR/report.html)."),
    ) -> None:
        """Write an HTML report (plots embedded) and its PNG plots next to it."""
        from polyrl.report import build_report

        page, pngs = build_report(run_dir, out)
        print(f"report: {page}  ({len(pngs)} plots: {', '.join(p.name for p in pngs)})")
