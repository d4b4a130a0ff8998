"""Task sampling and difficulty control."""

from polyrl.curriculum.samplers import SAMPLERS, TaskSampler, make_sampler, register_sampler

__all__ = ["SAMPLERS", "TaskSampler", "make_sampler", "register_sampler"]
