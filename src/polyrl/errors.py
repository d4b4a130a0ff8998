"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""


class UserError(Exception):
    """Bad input from the user (config, names, files). Reported in one line, exit code 2."""
