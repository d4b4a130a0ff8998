"""Task sampling and difficulty control."""

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
