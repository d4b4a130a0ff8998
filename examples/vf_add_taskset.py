"""A verifiers v1 taskset written locally, as a verifiers user writes one: tasks with data, two weighted
``@vf.reward`` functions and a ``@vf.metric``."""

import verifiers.v1 as vf


class AddData(vf.TaskData):
    target: int


class AddTask(vf.Task[AddData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(str(self.data.target) in trace.last_reply)

    @vf.reward(weight=0.5)
    async def brevity(self, trace: vf.Trace) -> float:
        return 1.0 / (1 + len(trace.last_reply))

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class AddConfig(vf.TasksetConfig):
    num_tasks: int = 8


class AddTaskset(vf.Taskset[AddTask, AddConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            data = AddData(prompt=f"{i}+{i}=", system_prompt="Answer with the number.", target=2 * i)
            yield AddTask(data, self.config.task)
