"""Task sampling and difficulty control."""

from polyrl.curriculum import adaptive as _adaptive  # noqa: F401 - registers the adaptive samplers
from polyrl.curriculum.difficulty import DifficultyController, curriculum_metrics, make_difficulty_controller
from polyrl.curriculum.samplers import SAMPLERS, TaskSampler, make_sampler, mixture_weights, register_sampler

__all__ = [
    "SAMPLERS",
    "DifficultyController",
    "TaskSampler",
    "curriculum_metrics",
    "make_difficulty_controller",
    "make_sampler",
    "mixture_weights",
    "register_sampler",
]
