"""crypto tasks."""
