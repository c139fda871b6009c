"""The rollout's router as a sans-IO state machine: the one copy of its bookkeeping.

It holds the request buffer, the policy and what the router knows of each instance (``InstanceView``),
takes events (a group or late siblings arrived, an instance was seen or went down, a chunk ended, a
sample finished or goes back to the buffer) and returns decisions (``Launch``, ``Refusal``). It does no
I/O and keeps no clock: the caller passes the time. The frontend's ``RolloutEngine`` drives it with HTTP
calls to SGLang instances; the simulator drives it with simulated instances and simulated time. Every
reservation a launch makes is given back by ``chunk_ended``, whatever ended the chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import SLO_CONFIG
from .buffer import RequestBuffer
from .policy import InstanceView, SchedulingPolicy, route_slo
from .request import ChunkRecord, Group, Sample, SampleState


@dataclass
class Launch:
    """Send the sample's next chunk (``max_new_tokens`` new tokens at most) to ``instance``. It holds
    ``reserve`` tokens of the instance's view until ``Router.chunk_ended``."""

    sample: Sample
    instance: int
    max_new_tokens: int
    reserve: int
    chunk: ChunkRecord
    priority: int | None = None  # for the instance's own queue (higher first); None: the policy set none
    came: str = "first"  # the sample's first chunk, or one that "stayed" on its last instance or "moved"


@dataclass
class Refusal:
    """A sample with an SLO that no instance can serve within it (HTTP 429 for the caller)."""

    sample: Sample
    reason: str


@dataclass
class Decisions:
    """What one scheduling round decided."""

    launches: list[Launch] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)


@dataclass
class Load:
    """An instance's telemetry (SGLang's load report), as an event for ``Router.instance_seen``."""

    capacity_tokens: int
    used_tokens: int
    running: int
    waiting: int


class Router:
    def __init__(self, policy: SchedulingPolicy, views: list[InstanceView],
                 slo_headroom: float = SLO_CONFIG.headroom):
        self.policy = policy
        self.views = views
        self.buffer = RequestBuffer()
        self.removed: set[int] = set()  # instances taken out of the deployment: never dispatched to
        self.slo_headroom = slo_headroom

    # ---- arrivals ------------------------------------------------------------------------------
    def submit(self, group: Group) -> None:
        self.buffer.add_group(group)

    def add_samples(self, group: Group, samples: list[Sample]) -> bool:
        """Late siblings join ``group`` if it is still in the buffer; False if it has left (done)."""
        if self.buffer.groups.get(group.group_id) is not group:
            return False
        self.buffer.add_samples(group, samples)
        return True

    # ---- instances -----------------------------------------------------------------------------
    def add_instance(self) -> int:
        """A new instance's index (its view starts healthy, with nothing known of its load)."""
        self.views.append(InstanceView(index=len(self.views)))
        return len(self.views) - 1

    def remove_instance(self, index: int) -> None:
        """Nothing more is dispatched to it; chunks in flight there end as they would."""
        self.removed.add(index)
        self.views[index].healthy = False

    def readmit(self, index: int) -> None:
        """A removed instance may be dispatched to again once it is seen healthy."""
        self.removed.discard(index)

    def instance_seen(self, index: int, load: Load | None) -> bool:
        """A load report, or None for a failed poll (the instance is down); returns whether its health
        changed. A removed instance stays down, whatever it reports."""
        view = self.views[index]
        was = view.healthy
        if index in self.removed:
            view.healthy = False
        elif load is None:
            view.healthy = False
        else:
            view.healthy = True
            view.capacity_tokens, view.used_tokens = load.capacity_tokens, load.used_tokens
            view.running, view.waiting = load.running, load.waiting
        return was != view.healthy

    def instance_down(self, index: int) -> None:
        self.views[index].healthy = False

    def retracted(self, index: int, count: int = 1) -> None:
        """SGLang retracted ``count`` of our requests on the instance (preemption pressure)."""
        self.views[index].retractions += count

    def healthy_count(self) -> int:
        return sum(v.healthy for v in self.views)

    # ---- decisions -----------------------------------------------------------------------------
    def schedule(self, now: float, slo: bool = True) -> Decisions:
        """One round: samples with an SLO first, each whole where it fits (``route_slo``), then what
        the policy places of the rest, on a snapshot of the views that each placement reserves on."""
        out = Decisions()
        snapshot = [v.snapshot() for v in self.views]
        if slo:
            for sample in self.buffer.pending():
                if sample.params.slo is not None:
                    placed = self.place_slo(sample, now, snapshot)
                    if isinstance(placed, Launch):
                        out.launches.append(placed)
                    elif placed is not None:
                        out.refused.append(placed)
        for decision in self.policy.schedule(self.buffer, snapshot):
            priorities = decision.priorities or [None] * len(decision.samples)
            for sample, max_new, priority in zip(decision.samples, decision.max_new_tokens, priorities):
                out.launches.append(self.launch(sample, decision.instance, max_new, now, priority))
        return out

    def place_slo(self, sample: Sample, now: float,
                  snapshot: list[InstanceView] | None = None) -> Launch | Refusal | None:
        """Place a sample with an SLO whole: a launch, a refusal (no instance meets its TPOT SLO), or
        None when no instance can take anything now. ``snapshot``: the round's views, reserved on too."""
        views = self.views if snapshot is None else snapshot
        target, verdict = route_slo([v for v in views if v.index not in self.removed], sample,
                                    self.slo_headroom)
        if target is None:
            if verdict is None:
                return None
            return Refusal(sample, f"TPOT SLO of {sample.params.slo.tpot_s * 1e3:g} ms cannot be met on any "
                                   f"instance: {verdict.reason}")
        if snapshot is not None:
            target.claim(sample, sample.remaining)
        return self.launch(sample, target.index, sample.remaining, now)

    def launch(self, sample: Sample, instance: int, max_new: int, now: float,
               priority: int | None = None) -> Launch:
        """Reserve the chunk's worst case on the instance and mark the sample running there."""
        reserve = self.views[instance].claim(sample, max_new)
        self.buffer.mark_running(sample, instance)
        came = "first" if not sample.chunks else (
            "stayed" if sample.chunks[-1].instance == instance else "moved")
        chunk = ChunkRecord(instance=instance, start=now, max_new_tokens=max_new, context_tokens=sample.context_len)
        sample.chunks.append(chunk)
        sample.priority = priority or 0
        return Launch(sample, instance, max_new, reserve, chunk, priority, came)

    # ---- outcomes ------------------------------------------------------------------------------
    def chunk_ended(self, launch: Launch, now: float) -> None:
        """The chunk came back, failed or was given up: its reservation goes."""
        self.views[launch.instance].release(launch.sample, launch.reserve)
        launch.chunk.end = now

    def requeue(self, sample: Sample) -> None:
        """The sample waits for its next chunk (it came back unfinished, or its chunk was lost)."""
        self.buffer.requeue(sample)

    def finish(self, sample: Sample, state: SampleState, now: float) -> Group | None:
        """The sample is done (finished, failed or aborted); its group, when that was its last live sample
        (the group has then left the buffer). A sample already done is left as it is."""
        if sample.done:
            return None
        sample.finished_at = now
        done_group = self.buffer.finish(sample, state)
        self.policy.on_sample_finished(sample)
        if done_group is not None:
            self.policy.on_group_done(done_group.group_id)
        return done_group

    def set_policy(self, policy: SchedulingPolicy) -> None:
        """Swap the policy; only between rollouts, since policies keep per-group state."""
        if self.buffer.groups:
            raise RuntimeError("cannot change the scheduler while a rollout is in flight")
        self.policy = policy
