"""Scheduling policies: pure objects, no I/O. They read the buffer and instance views and return
plain ``Dispatch`` decisions; the engine (or the simulator) carries them out."""

from __future__ import annotations

from dataclasses import dataclass, field

from .buffer import RequestBuffer
from .request import Sample


@dataclass
class InstanceView:
    """What a policy may know of an instance: health, telemetry and what we already sent it."""

    index: int
    healthy: bool = True
    capacity_tokens: int = 0  # KV capacity reported by the instance
    used_tokens: int = 0  # KV in use, from telemetry
    running: int = 0
    waiting: int = 0
    reserved_tokens: int = 0  # worst-case tokens of our chunks in flight there
    inflight: int = 0  # our chunks in flight there

    @property
    def load(self) -> float:
        """Fraction of KV capacity our in-flight work can claim; the dispatch criterion."""
        if self.capacity_tokens <= 0:
            return float(self.reserved_tokens)
        return self.reserved_tokens / self.capacity_tokens


@dataclass
class Dispatch:
    """Send these samples' next chunk (``max_new_tokens`` each) to one instance."""

    instance: int
    samples: list[Sample]
    max_new_tokens: list[int] = field(default_factory=list)


def chunk_tokens(sample: Sample, chunk_size: int | None) -> int:
    return sample.remaining if chunk_size is None else min(chunk_size, sample.remaining)


def worst_case_tokens(sample: Sample, max_new: int) -> int:
    return len(sample.prompt_ids) + sample.generated + max_new


class SchedulingPolicy:
    """Interface: ``schedule`` is called whenever the buffer or the instances change."""

    name = "base"

    def schedule(self, buffer: RequestBuffer, instances: list[InstanceView]) -> list[Dispatch]:
        raise NotImplementedError

    def on_sample_finished(self, sample: Sample) -> None:
        """Hook for policies that learn from finished samples (length estimates)."""


def least_loaded(instances: list[InstanceView]) -> InstanceView | None:
    healthy = [v for v in instances if v.healthy]
    return min(healthy, key=lambda v: (v.load, v.inflight, v.index)) if healthy else None


class WholeGroupPolicy(SchedulingPolicy):
    """veRL-style baseline: each group goes whole, unchunked, to the least-loaded instance.

    SGLang queues what does not fit, so every pending group is dispatched at once; the load used
    for the choice counts our own reservations, which telemetry would show only later.
    """

    name = "group"

    def schedule(self, buffer: RequestBuffer, instances: list[InstanceView]) -> list[Dispatch]:
        by_group: dict[str, list[Sample]] = {}
        for sample in buffer.pending():
            by_group.setdefault(sample.group_id, []).append(sample)
        decisions = []
        for samples in by_group.values():
            target = least_loaded(instances)
            if target is None:
                break
            budgets = [chunk_tokens(s, None) for s in samples]
            target.reserved_tokens += sum(worst_case_tokens(s, b) for s, b in zip(samples, budgets))
            target.inflight += len(samples)
            decisions.append(Dispatch(target.index, samples, budgets))
        return decisions


POLICIES: dict[str, type[SchedulingPolicy]] = {WholeGroupPolicy.name: WholeGroupPolicy}


def make_policy(name: str, **kwargs) -> SchedulingPolicy:
    try:
        return POLICIES[name](**kwargs)
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r}; choose one of {sorted(POLICIES)}") from None
