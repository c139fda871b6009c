"""The request buffer: every sample of every live group, and which of them wait for a dispatch."""

from __future__ import annotations

from .request import Group, Sample, SampleState


class RequestBuffer:
    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self._pending: dict[str, Sample] = {}  # insertion order = arrival order

    def add_group(self, group: Group) -> None:
        if group.group_id in self.groups:
            raise ValueError(f"group {group.group_id!r} is already in the buffer")
        self.groups[group.group_id] = group
        for sample in group.samples:
            self._pending[sample.rid] = sample

    def add_samples(self, group: Group, samples: list[Sample]) -> None:
        """Late siblings join a group that is still live (per-sample requests of one prompt)."""
        group.samples.extend(samples)
        for sample in samples:
            self._pending[sample.rid] = sample

    def live_samples(self) -> int:
        """Samples of the groups still in the buffer (a group leaves once all of its samples are done)."""
        return sum(len(g.samples) for g in self.groups.values())

    def pending(self) -> list[Sample]:
        return list(self._pending.values())

    def has_pending(self) -> bool:
        return bool(self._pending)

    def mark_running(self, sample: Sample, instance: int) -> None:
        self._pending.pop(sample.rid, None)
        sample.state = SampleState.RUNNING
        sample.instance = instance

    def requeue(self, sample: Sample) -> None:
        """A chunk came back unfinished (or its instance died): the sample waits for its next dispatch."""
        sample.state = SampleState.PENDING
        sample.instance = None
        self._pending[sample.rid] = sample

    def finish(self, sample: Sample, state: SampleState = SampleState.FINISHED) -> Group | None:
        """The sample is done. Returns its group when that was the group's last live sample: the
        group has then left the buffer (the engine and the simulator end a group the same way)."""
        self._pending.pop(sample.rid, None)
        sample.state = state
        sample.instance = None
        group = self.groups.get(sample.group_id)
        if group is not None and group.done:
            return self.remove_group(group.group_id)
        return None

    def remove_group(self, group_id: str) -> Group | None:
        group = self.groups.pop(group_id, None)
        if group:
            for sample in group.samples:
                self._pending.pop(sample.rid, None)
        return group

    def running(self) -> list[Sample]:
        return [s for g in self.groups.values() for s in g.samples if s.state == SampleState.RUNNING]
