"""Built-in tasks, one module per category."""
