"""graph tasks."""
