"""grid tasks."""
