"""Reproducible experiments built on the Trainer: each writes run directories and a Markdown report."""
