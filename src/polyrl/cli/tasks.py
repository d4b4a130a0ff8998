"""``polyrl tasks …``: list, show, sample, export, score, check-leakage."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from polyrl.tasks import list_tasks

app = typer.Typer(help="Browse, sample, export and score verifiable tasks.", no_args_is_help=True)
console = Console()


@app.command("list")
def list_cmd(category: str = typer.Option(None, help="Only tasks of this category.")) -> None:
    """A table of the registered tasks."""
    table = Table("name", "category", "description")
    for cls in list_tasks(category):
        table.add_row(cls.name, cls.category, cls.description)
    console.print(table)
