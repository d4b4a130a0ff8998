"""What a polyrl command that refused its input printed: the one-line error the project promises."""


def one_error_line(capsys) -> str:
    """The captured stderr, checked to be exactly one line and polyrl's error line; that line."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("polyrl: error: "), err
    return err[0]
