"""Task sampling and difficulty control."""

from polyrl.curriculum.difficulty import DifficultyController, make_difficulty_controller
from polyrl.curriculum.samplers import SAMPLERS, TaskSampler, make_sampler, mixture_weights, register_sampler

__all__ = [
    "SAMPLERS",
    "DifficultyController",
    "TaskSampler",
    "make_difficulty_controller",
    "make_sampler",
    "mixture_weights",
    "register_sampler",
]
