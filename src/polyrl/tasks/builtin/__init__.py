"""Built-in tasks, one module per category (and its puzzles); the task registry imports these on first use."""

MODULES = tuple(
    f"polyrl.tasks.builtin.{module}"
    for module in (
        "arithmetic",
        "arithmetic_target",
        "arithmetic_proposals",
        "logic",
        "logic_puzzles",
        "grid",
        "grid_puzzles",
        "graph",
        "graph_paths",
        "sequential",
        "crypto",
        "search_puzzles",
        "compositions",
        "visual",
        "visual_puzzles",
    )
)
