"""The ``polyrl`` command: a thin shell over the library. Parse, call, print.

Errors a user can cause (:class:`~polyrl.errors.UserError`) print one line on stderr and exit with code 2.
"""

from __future__ import annotations

import sys
import warnings

import typer

from polyrl.cli import eval as _eval
from polyrl.cli import experiment as _experiment
from polyrl.cli import experiment_arms as _experiment_arms
from polyrl.cli import experiment_transfer as _experiment_transfer
from polyrl.cli import models as _models
from polyrl.cli import push as _push
from polyrl.cli import rm as _rm
from polyrl.cli import run_report as _report
from polyrl.cli import serve as _serve
from polyrl.cli import synth as _synth
from polyrl.cli import tasks as _tasks
from polyrl.cli import train as _train
from polyrl.errors import UserError, one_line_warning

app = typer.Typer(
    name="polyrl",
    help="Multi-task reinforcement learning for language-model policies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(_tasks.app, name="tasks")
app.add_typer(_experiment.app, name="experiment")
_experiment.app.command("critic")(_experiment_arms.critic)
_experiment.app.command("surgery")(_experiment_arms.surgery)
_experiment.app.command("arms")(_experiment_arms.arms)
_experiment.app.command("transfer")(_experiment_transfer.transfer)
_experiment.app.command("specialists")(_experiment_transfer.specialists)
app.add_typer(_rm.app, name="rm")
app.add_typer(_eval.app, name="eval")
app.add_typer(_synth.app, name="synth")
app.add_typer(_models.app, name="models")
_train.register(app)
_serve.register(app)
_report.register(app)
_push.register(app)


def run(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv`` and return the exit code (what tests call)."""
    import os

    import click

    # progress bars of `datasets` would bury one-line errors on stderr; polyrl shows its own progress.
    # The variable is read when `datasets` is imported; if something imported it already, switch them off.
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if "datasets" in sys.modules and os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1":
        sys.modules["datasets"].disable_progress_bars()

    usage_errors, aborts = _click_exceptions(click)
    shown, warnings.showwarning = warnings.showwarning, one_line_warning
    try:
        result = app(args=argv, standalone_mode=False)
    except UserError as exc:
        print(f"polyrl: error: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, *aborts):
        print("polyrl: interrupted", file=sys.stderr)
        return 130
    except usage_errors as exc:
        exc.show()
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    finally:
        warnings.showwarning = shown
    return result if isinstance(result, int) else 0


def _click_exceptions(click) -> tuple[tuple[type, ...], tuple[type, ...]]:
    """Click's usage errors and aborts, and those of the copy of click newer typer versions vendor (an option
    out of its range raises the vendored ``BadParameter``, which is not a ``click.ClickException``)."""
    usage, aborts = [click.ClickException], [click.exceptions.Abort]
    try:
        from typer._click.exceptions import ClickException
        from typer.exceptions import Abort
    except ImportError:
        return tuple(usage), tuple(aborts)
    return (*usage, ClickException), (*aborts, Abort)


def main() -> None:
    sys.exit(run(sys.argv[1:]))
