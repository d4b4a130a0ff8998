"""polyrl: multi-task reinforcement learning for language-model policies."""

from polyrl.errors import UserError
from polyrl.tasks import Problem, Task, Verdict, get_task, list_tasks, register_task

__version__ = "0.1.0"

__all__ = ["Problem", "Task", "UserError", "Verdict", "__version__", "get_task", "list_tasks", "register_task"]
