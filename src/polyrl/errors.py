"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""

import sys


class UserError(Exception):
    """Bad input from the user (config, names, files). Reported in one line, exit code 2."""


def one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for the CLI: the message alone, without the source line Python adds."""
    print(f"polyrl: warning: {message}", file=file or sys.stderr)
