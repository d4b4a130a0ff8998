"""search tasks."""
