"""logic tasks."""
