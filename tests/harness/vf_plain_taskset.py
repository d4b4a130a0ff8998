"""A verifiers taskset whose reward and metric are plain ``def`` functions (verifiers itself awaits them all)."""

import verifiers.v1 as vf


class PlainData(vf.TaskData):
    target: int


class PlainTask(vf.Task[PlainData]):
    @vf.reward(weight=2.0)
    def correct(self, trace: vf.Trace) -> float:
        return float(str(self.data.target) in trace.last_reply)

    @vf.metric
    def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class PlainTaskset(vf.Taskset[PlainTask, vf.TasksetConfig]):
    def load(self):
        for i in range(4):
            yield PlainTask(PlainData(prompt=f"{i}+{i}=", target=2 * i), self.config.task)
