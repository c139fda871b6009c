"""Scheduling policies: pure objects, no I/O. They read the buffer and instance views and return
plain ``Dispatch`` decisions; the engine (or the simulator) carries them out."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, replace
from typing import Callable

from ..config import SCHEDULER, SLO_CONFIG
from .migration import MigrationCost
from .buffer import RequestBuffer
from .request import Sample
from .slo import Admission, StepTime, admit


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
    retractions: int = 0  # SGLang retractions our chunks there have seen (preemption pressure)
    # Our chunks in flight there, per group. A group's samples share one prompt, and SGLang's radix
    # cache holds it once for all of them: the prompt is reserved once per group and instance.
    groups: dict[str, int] = field(default_factory=dict)
    # SLO samples in flight there: rid -> (TPOT SLO in seconds, context tokens), for VBS admission.
    slo_requests: dict[str, tuple[float, int]] = field(default_factory=dict)
    step_s: StepTime | None = None  # the instance's own decode step-time fit, once it has one

    @property
    def load(self) -> float:
        """Fraction of KV capacity our in-flight work can claim; the dispatch criterion."""
        return self.load_with(0)

    def load_with(self, tokens: int) -> float:
        """The load once ``tokens`` more are reserved."""
        if self.capacity_tokens <= 0:
            return float(self.reserved_tokens + tokens)
        return (self.reserved_tokens + tokens) / self.capacity_tokens

    def claim_tokens(self, sample: Sample, max_new: int) -> int:
        """The worst-case KV a chunk of ``max_new`` tokens adds here: the sample's generated tokens and
        the chunk, and its prompt unless a sibling in flight here already holds it."""
        shared = self.groups.get(sample.group_id, 0) > 0
        return sample.generated + max_new + (0 if shared else len(sample.prompt_ids))

    def claim(self, sample: Sample, max_new: int) -> int:
        """Reserve a chunk's worst case here; returns the part that is the chunk's own (generated +
        ``max_new``), which ``release`` gives back. The prompt stays reserved while any sibling runs."""
        own = sample.generated + max_new
        self.reserved_tokens += self.claim_tokens(sample, max_new)
        self.groups[sample.group_id] = self.groups.get(sample.group_id, 0) + 1
        self.inflight += 1
        slo = sample.params.slo
        if slo is not None and slo.tpot_s is not None:
            self.slo_requests[sample.rid] = (slo.tpot_s, sample.context_len)
        return own

    def release(self, sample: Sample, own: int) -> None:
        """The chunk came back (or was lost): its own reservation goes, and its prompt's with the last
        sibling in flight here."""
        self.reserved_tokens -= own
        self.inflight -= 1
        self.slo_requests.pop(sample.rid, None)
        left = self.groups.get(sample.group_id, 0) - 1
        if left > 0:
            self.groups[sample.group_id] = left
        else:
            self.groups.pop(sample.group_id, None)
            self.reserved_tokens -= len(sample.prompt_ids)

    def snapshot(self) -> "InstanceView":
        """A copy a policy may reserve on while it plans, leaving this view as it is."""
        return replace(self, groups=dict(self.groups), slo_requests=dict(self.slo_requests))


@dataclass
class Dispatch:
    """Send these samples' next chunk (``max_new_tokens`` each) to one instance."""

    instance: int
    samples: list[Sample]
    max_new_tokens: list[int] = field(default_factory=list)
    priorities: list[int] = field(default_factory=list)  # for the instance's own queue; higher first


def chunk_tokens(sample: Sample, chunk_size: int | None, page_size: int | None = None) -> int:
    """New tokens of the sample's next chunk. With paged KV (``page_size`` > 1) the chunk ends where
    the KV the instance keeps (every token but the last sampled one) fills whole pages: SGLang caches
    only whole pages, so a continuation then recomputes one token instead of a partial page."""
    if chunk_size is None or chunk_size >= sample.remaining:
        return sample.remaining
    if page_size is None or page_size <= 1 or chunk_size < page_size:
        return chunk_size
    return chunk_size - (sample.context_len + chunk_size - 1) % page_size


def auto_chunk(sample: Sample) -> int:
    """A sample's chunk without a set ``--chunk-size``: a fixed share of its ``max_new_tokens`` (at least
    ``SCHEDULER.min_chunk``). The frontend reserves each chunk's worst case on its instance, so a chunk
    as long as the whole budget (no division) reserves far more than most samples write and keeps
    batches small; and a whole-budget chunk cannot move between instances while it runs."""
    return max(SCHEDULER.min_chunk, -(-sample.params.max_new_tokens // SCHEDULER.auto_chunks))


def worst_case_tokens(sample: Sample, max_new: int) -> int:
    """A chunk's KV with its prompt counted in full (an upper bound wherever it runs)."""
    return sample.context_len + max_new


class SchedulingPolicy:
    """Interface: ``schedule`` is called whenever the buffer or the instances change."""

    name = "base"
    migration: MigrationCost | None = None  # how the policy prices a move; None: it never moves a sample

    def schedule(self, buffer: RequestBuffer, instances: list[InstanceView]) -> list[Dispatch]:
        raise NotImplementedError

    def on_sample_finished(self, sample: Sample) -> None:
        """Hook for policies that learn from finished samples (length estimates)."""

    def on_group_done(self, group_id: str) -> None:
        """Hook: the group left the buffer; forget what was kept about it."""


def best_effort(samples: list[Sample]) -> list[Sample]:
    """The samples the rollout policies place: those without an SLO (``route_slo`` places the others)."""
    return [s for s in samples if s.params.slo is None]


def least_loaded(instances: list[InstanceView],
                 eligible: Callable[[InstanceView], bool] = lambda v: v.healthy) -> InstanceView | None:
    candidates = [v for v in instances if eligible(v)]
    return min(candidates, key=lambda v: (v.load, v.inflight, v.index)) if candidates else None


class WholeGroupPolicy(SchedulingPolicy):
    """veRL-style baseline: each group goes whole, unchunked, to the least-loaded instance.

    SGLang queues what does not fit, so every pending group is dispatched at once; the load used
    for the choice counts our own reservations, which telemetry would show only later.
    """

    name = "group"

    def schedule(self, buffer: RequestBuffer, instances: list[InstanceView]) -> list[Dispatch]:
        by_group: dict[str, list[Sample]] = {}
        for sample in best_effort(buffer.pending()):
            by_group.setdefault(sample.group_id, []).append(sample)
        decisions = []
        for samples in by_group.values():
            target = self.pick(instances)
            if target is None:
                break
            budgets = [chunk_tokens(s, None) for s in samples]
            for s, b in zip(samples, budgets):
                target.claim(s, b)
            decisions.append(Dispatch(target.index, samples, budgets))
        return decisions

    def pick(self, instances: list[InstanceView]) -> InstanceView | None:
        return least_loaded(instances)


def take_turn(policy, instances: list[InstanceView]) -> InstanceView | None:
    """The next healthy instance in turn; ``policy.turn`` counts the turns taken."""
    healthy = [v for v in instances if v.healthy]
    if not healthy:
        return None
    policy.turn += 1
    return healthy[(policy.turn - 1) % len(healthy)]


class RoundRobinPolicy(WholeGroupPolicy):
    """veRL's dispatch, the benchmark's plain-SGLang baseline: group after group, whole and unchunked,
    to the next instance in turn, whatever its load."""

    name = "round-robin"

    def __init__(self):
        self.turn = 0

    def pick(self, instances: list[InstanceView]) -> InstanceView | None:
        return take_turn(self, instances)


class PerSamplePolicy(SchedulingPolicy):
    """slime's dispatch through a load balancer, a baseline: every sample its own request, whole and
    unchunked, placed one at a time as the balancer receives it. SGLang queues what does not fit, so
    every pending sample is placed at once. This one takes the instances in turn."""

    name = "sample-round-robin"

    def __init__(self):
        self.turn = 0

    def schedule(self, buffer: RequestBuffer, instances: list[InstanceView]) -> list[Dispatch]:
        by_instance: dict[int, Dispatch] = {}
        for sample in best_effort(buffer.pending()):
            target = self.pick(instances, sample)
            if target is None:
                break
            budget = chunk_tokens(sample, None)
            target.claim(sample, budget)
            d = by_instance.setdefault(target.index, Dispatch(target.index, []))
            d.samples.append(sample)
            d.max_new_tokens.append(budget)
        return list(by_instance.values())

    def pick(self, instances: list[InstanceView], sample: Sample) -> InstanceView | None:
        return take_turn(self, instances)


class PowerOfTwoPolicy(PerSamplePolicy):
    """sglang-router's ``power_of_two``: of two instances drawn at random, the one with fewer requests
    in flight (the router's own count: sent and not yet answered)."""

    name = "sample-power-of-two"

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def pick(self, instances: list[InstanceView], sample: Sample) -> InstanceView | None:
        healthy = [v for v in instances if v.healthy]
        if len(healthy) < 2:
            return healthy[0] if healthy else None
        a, b = self.rng.sample(healthy, 2)
        return a if a.inflight <= b.inflight else b


class BlindPowerOfTwoPolicy(PowerOfTwoPolicy):
    """sglang-router 0.3.2's ``power_of_two`` as it runs in front of SGLang 0.5.23, a baseline: the loads it
    compares all read 0. Its load monitor polls each worker's ``/get_load``, a route SGLang 0.5.23 does not
    serve ("No loads fetched from workers"), and its own request counter stays at 0 in this mode: in the
    router's debug log every selection of a 256-request burst over 4 instances compared 0 with 0, and the
    instances got 54-84 requests each (uniform draws spread as much). So the first of the two random
    draws wins: a uniformly random placement. The simulator's model of that baseline, not a scheduler a
    deployment is offered."""

    name = "sample-power-of-two-blind"

    def pick(self, instances: list[InstanceView], sample: Sample) -> InstanceView | None:
        healthy = [v for v in instances if v.healthy]
        if len(healthy) < 2:
            return healthy[0] if healthy else None
        return self.rng.sample(healthy, 2)[0]


class CacheAwarePolicy(PerSamplePolicy):
    """sglang-router's ``cache_aware`` (0.3.2, its defaults), as it places ``/generate`` requests with
    ``input_ids``. The router keeps one radix tree of the text of the requests it sent (their decimal ids
    joined by spaces), each node marked with the instances whose text passes through it. While the
    instances' requests in flight are balanced, a request goes to an instance at the deepest node its
    text reaches, if that match is more than ``cache_threshold`` of the text (siblings share a prompt;
    so do prompts that share a chat template, where the template is that long), else to the instance
    with the fewest requests in flight; once the busiest instance has more than ``balance_abs`` requests
    over the idlest and ``balance_rel`` times as many, to the idlest.

    The miss rule is the router's as measured, not as its documentation has it ("the worker with the
    smallest tree"): behind workers that hold every request open, requests that match nothing go to the
    instances in turn whatever their text's length, and behind workers that answer at once all go to
    one (``benchmarks.router_probe``).

    Where instances tie (the deepest node is marked with more than one, or their in-flight counts are
    equal), the router takes the first key of a Rust map, in an order its hasher sets per process; this
    takes the lowest index. Requests that reach the router in turn tie only between instances that
    differ in nothing but their index, so the order does not change what a rollout costs."""

    name = "sample-cache-aware"

    def __init__(self, cache_threshold: float = 0.3, balance_abs: int = 64, balance_rel: float = 1.5):
        self.cache_threshold, self.balance_abs, self.balance_rel = cache_threshold, balance_abs, balance_rel
        self.sent: dict[int, set[str]] = {}  # instance -> the texts sent there

    @staticmethod
    def routing_text(sample: Sample) -> str:
        return " ".join(map(str, sample.prompt_ids))

    def matched(self, text: str, instances: list[InstanceView]) -> tuple[float, list[InstanceView]]:
        """The deepest match of ``text`` among the healthy instances' texts, as a share of it, and the
        instances whose texts reach it."""
        best, where = 0, []
        for v in instances:
            n = max((len(os.path.commonprefix([text, other])) for other in self.sent.get(v.index, ())), default=0)
            if n > best:
                best, where = n, [v]
            elif n == best and n > 0:
                where.append(v)
        return (best / len(text) if text else 0.0), where

    def pick(self, instances: list[InstanceView], sample: Sample) -> InstanceView | None:
        healthy = [v for v in instances if v.healthy]
        if not healthy:
            return None
        target = min(healthy, key=lambda v: (v.inflight, v.index))  # the idlest
        busiest = max(v.inflight for v in healthy)
        text = self.routing_text(sample)
        if not (busiest - target.inflight > self.balance_abs and busiest > self.balance_rel * target.inflight):
            rate, where = self.matched(text, healthy)
            if where and rate > self.cache_threshold:
                target = where[0]
        self.sent.setdefault(target.index, set()).add(text)
        return target


def route_slo(instances: list[InstanceView], sample: Sample,
              headroom: float = SLO_CONFIG.headroom) -> tuple[InstanceView | None, Admission | None]:
    """Where a sample with an SLO runs, whole (never chunked): among the healthy instances whose VBS
    admission holds for it, the one with the smallest virtual batch, then the least loaded. An
    instance without a step-time fit yet admits it (its own admission still decides). Returns the
    instance, or None and the refusal of the instance that came closest."""
    slo = sample.params.slo
    candidates, refused = [], []
    for v in instances:
        if not v.healthy:
            continue
        tpots = [t for t, _ in v.slo_requests.values()]
        if slo is None or slo.tpot_s is None or v.step_s is None:
            candidates.append((sum(min([*tpots, 1e9]) / t for t in tpots), v.load, v.index, v, None))
            continue
        verdict = admit(tpots, [kv for _, kv in v.slo_requests.values()], slo.tpot_s, sample.context_len,
                        v.step_s, headroom)
        (candidates if verdict.admitted else refused).append((verdict.virtual_batch, v.load, v.index, v, verdict))
    if candidates:
        best = min(candidates, key=lambda c: c[:3])
        return best[3], best[4]
    if refused:
        return None, min(refused, key=lambda c: c[4].estimated_tpot_s / c[4].bound_s)[4]
    return None, None


# A rank key's fields (at most three integers: a tier, a length, a sibling index), each offset by half
# its range and packed into one integer that stays within SGLang's int64 priority field
PRIORITY_FIELD_BITS, PRIORITY_FIELDS = 20, 3


def rank_priority(key: tuple) -> int:
    """A non-negative priority (higher first) that orders samples as their rank ``key`` does (lower
    first), the same in every call: so a queue can hold chunks ranked at different times. Fields are
    clamped to +-2^19 (lengths and sibling indices are far below)."""
    half = 1 << (PRIORITY_FIELD_BITS - 1)
    packed = 0
    for part in (*key, *(0,) * (PRIORITY_FIELDS - len(key))):
        packed = (packed << PRIORITY_FIELD_BITS) + min(max(int(part), -half), half - 1) + half
    return (1 << (PRIORITY_FIELD_BITS * PRIORITY_FIELDS)) - 1 - packed


class ChunkedPolicy(SchedulingPolicy):
    """Divided rollout: every dispatch is one chunk of at most ``chunk_size`` new tokens, sent to the
    least-loaded instance that has room for it; the sample then returns to the buffer.

    Admission keeps each instance below the point where SGLang would retract: the worst-case KV of
    our chunks in flight there (prompt + generated + chunk, per sample) stays within
    ``kv_headroom`` of its capacity. An idle instance always takes one chunk, so a request larger
    than the headroom still runs. Subclasses only choose the order in which samples are served.
    """

    name = "divided"

    def __init__(self, chunk_size: int | None = SCHEDULER.chunk_size, kv_headroom: float = SCHEDULER.kv_headroom,
                 affinity_slack: float = SCHEDULER.affinity_slack, migration: MigrationCost | None = None,
                 whole_tail: bool = SCHEDULER.whole_tail, page_size: int | None = None):
        if chunk_size is not None and chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self.chunk_size = chunk_size  # None: each sample's ``auto_chunk``
        self.page_size = page_size  # the instances' KV page (None: unpaged): chunk ends are aligned to it
        self.kv_headroom = kv_headroom
        # In the tail (every waiting sample fits with its whole remaining budget) a chunk boundary
        # only costs: a round trip to the router, a queue and a prefill, with nothing to make room for.
        self.whole_tail = whole_tail
        # A continuation stays on its last instance (its KV is cached there) unless another
        # instance is less loaded by more than this share of capacity, plus the share of the
        # chunk's time that moving adds (a pool load, or a re-prefill without a pool).
        self.affinity_slack = affinity_slack
        self.migration = migration or MigrationCost()

    def order(self, pending: list[Sample], buffer: RequestBuffer) -> list[Sample]:
        return pending  # arrival order

    def chunk_of(self, sample: Sample) -> int:
        """The most new tokens of one of the sample's chunks."""
        return self.chunk_size if self.chunk_size is not None else auto_chunk(sample)

    def _fits(self, view: InstanceView, tokens: int) -> bool:
        if not view.healthy:
            return False
        if view.inflight == 0 or view.capacity_tokens <= 0:
            return True
        return view.reserved_tokens + tokens <= self.kv_headroom * view.capacity_tokens

    def select_instance(self, instances: list[InstanceView], sample: Sample, budget: int,
                        previous: int | None = None, move_share: float = 0.0) -> InstanceView | None:
        """SELECT_INSTANCE: the healthy instance with room for the chunk that is least loaded once it
        runs there (where a sibling already holds the prompt, the chunk costs less); the sample's
        previous instance when moving would not pay (a device hit is free, a pool load or a re-prefill
        is not: ``move_share`` is the share of the chunk's time a move adds)."""
        cost = {v.index: v.claim_tokens(sample, budget) for v in instances if v.healthy}
        fitting = [v for v in instances if v.index in cost and self._fits(v, cost[v.index])]
        if not fitting:
            return None
        best = min(fitting, key=lambda v: (v.load_with(cost[v.index]), v.inflight, v.index))
        if previous is not None and previous != best.index and previous < len(instances):
            prev = instances[previous]
            slack = self.affinity_slack + move_share
            if (prev.index == previous and prev.index in cost and self._fits(prev, cost[previous])
                    and prev.load_with(cost[previous]) <= best.load_with(cost[best.index]) + slack):
                return prev
        return best

    def move_share(self, sample: Sample, budget: int) -> float:
        if not sample.chunks:
            return 0.0
        return self.migration.overhead_share(sample.context_len, budget, sample.pool_tokens)

    def in_tail(self, pending: list[Sample], instances: list[InstanceView]) -> bool:
        """Whether every waiting sample fits, with its whole remaining budget, in the headroom the
        healthy instances have left."""
        free = sum(max(0.0, self.kv_headroom * v.capacity_tokens - v.reserved_tokens)
                   for v in instances if v.healthy and v.capacity_tokens > 0)
        return sum(worst_case_tokens(s, s.remaining) for s in pending) <= free

    def schedule(self, buffer: RequestBuffer, instances: list[InstanceView]) -> list[Dispatch]:
        by_instance: dict[int, Dispatch] = {}
        ordered = self.order(best_effort(buffer.pending()), buffer)
        key = self.queue_rank()
        tail = self.whole_tail and ordered and self.in_tail(ordered, instances)
        for rank, sample in enumerate(ordered):
            budget = chunk_tokens(sample, None if tail else self.chunk_of(sample), self.page_size)
            target = self.select_instance(instances, sample, budget,
                                          sample.chunks[-1].instance if sample.chunks else sample.affinity,
                                          self.move_share(sample, budget))
            if target is None:
                if not any(v.healthy and v.inflight == 0 for v in instances):
                    break  # every instance is full: the rest waits for chunks to come back
                continue
            target.claim(sample, budget)
            self.on_dispatch(sample)
            d = by_instance.setdefault(target.index, Dispatch(target.index, []))
            d.samples.append(sample)
            d.max_new_tokens.append(budget)
            d.priorities.append(len(ordered) - rank if key is None else rank_priority(key(sample)))
        return list(by_instance.values())

    def queue_rank(self):
        """The rank key (sample -> tuple, lower first) the instances' queues follow, or None: a chunk's
        priority is then its place in this call's order (arrival order is the same in every call)."""
        return None

    def on_dispatch(self, sample: Sample) -> None:
        """Hook for policies that track waiting (starvation bound)."""


class ContextPolicy(ChunkedPolicy):
    """Seer's context-aware scheduling on top of divided rollout.

    - Each group's first sample is its probe; probes go first, smallest-generated-first (SFS), so
      every group quickly reveals how long it writes.
    - The other samples go largest-estimated-group-length-first (approximate LFS): a group's
      estimate is its longest finished sibling, or ``max_tokens`` while none has finished.
    - Equal estimates (at the start, every group's) go sibling by sibling across the groups: each
      group's second sample, then each group's third, and so on. Before any length is known, the KV
      is spread over all groups instead of filled with whole groups in arrival order, so no group
      waits whole behind others, and every group shows its length early.
    - Starvation bound: an underserved sample gets an occasional turn. Once per ``starvation_bound``
      dispatches, the sample that has waited longest goes first, whatever its estimate, if it has
      waited through that many dispatches. One turn at a time: when the working set is twice the KV
      (Seer's load), most waiting samples wait that long, and serving all of them first would turn
      the length order into arrival order, delaying the longest samples' continuations.
    """

    name = "context"

    def __init__(self, chunk_size: int | None = SCHEDULER.chunk_size, kv_headroom: float = SCHEDULER.kv_headroom,
                 affinity_slack: float = SCHEDULER.affinity_slack, migration: MigrationCost | None = None,
                 starvation_bound: int = SCHEDULER.starvation_bound, whole_tail: bool = SCHEDULER.whole_tail,
                 page_size: int | None = None, spread_ties: bool = True):
        super().__init__(chunk_size, kv_headroom, affinity_slack, migration, whole_tail, page_size)
        self.starvation_bound = starvation_bound
        # False: equal estimates in waiting order, so whole groups in arrival order at the start; for
        # comparisons, and for the simulator to recheck runs measured that way.
        self.spread_ties = spread_ties
        self.clock = 0  # dispatches made so far: a logical clock, so decisions stay deterministic
        self._waiting_since: dict[str, int] = {}  # rid -> the clock when it began to wait
        self._last_turn = 0  # the clock when an underserved sample was last put in front
        self._promoted: str | None = None  # the sample put in front by the last ``order``
        self._finished_longest: dict[str, int] = {}

    def estimates(self) -> dict[str, int]:
        """Each group's estimated total output length, for the groups that have one (the others count
        as their ``max_new_tokens``): a table, so ranking a sample is a lookup, not a call."""
        return self._finished_longest

    def estimate(self, sample: Sample) -> int:
        """Estimated total output length of the sample's group."""
        return self.estimates().get(sample.group_id, sample.params.max_new_tokens)

    def on_sample_finished(self, sample: Sample) -> None:
        longest = self._finished_longest.get(sample.group_id, 0)
        self._finished_longest[sample.group_id] = max(longest, sample.generated)
        self._waiting_since.pop(sample.rid, None)

    def on_group_done(self, group_id: str) -> None:
        self._finished_longest.pop(group_id, None)

    def on_dispatch(self, sample: Sample) -> None:
        if sample.rid == self._promoted:
            self._last_turn, self._promoted = self.clock, None
        self.clock += 1
        self._waiting_since.pop(sample.rid, None)

    def rank_key(self):
        """Probes first by SFS (fewest generated tokens), then the rest by LFS group estimate, equal
        estimates sibling by sibling across groups."""
        estimates, spread = self.estimates(), self.spread_ties

        def rank(s: Sample) -> tuple:
            if s.is_probe:
                return (1, len(s.output_ids))
            return (2, -estimates.get(s.group_id, s.params.max_new_tokens), s.index if spread else 0)

        return rank

    def queue_rank(self):
        """The instances' queues follow ``rank_key`` too. A chunk's priority must compare with those
        sent by earlier calls: most of a rollout is dispatched in the first call, and a continuation
        sent later joins a queue of first chunks; ranked by its place in its own call, it would go
        behind all of them whatever its group's estimate. The speculation budget reads the same
        priorities to find a batch's long-tail requests."""
        return self.rank_key()

    def order(self, pending: list[Sample], buffer: RequestBuffer) -> list[Sample]:
        """``rank_key`` order (ties: longest waiting first), with one underserved sample in front once
        per ``starvation_bound`` dispatches: the one that has waited longest, if that is past the bound."""
        clock, since_of = self.clock, self._waiting_since
        for s in pending:
            since_of.setdefault(s.rid, clock)
        self._promoted = None
        if pending and clock - self._last_turn >= self.starvation_bound:
            oldest = min(pending, key=lambda s: since_of[s.rid])
            if clock - since_of[oldest.rid] >= self.starvation_bound:
                self._promoted = oldest.rid
        rank, promoted = self.rank_key(), self._promoted
        return sorted(pending, key=lambda s: (0, since_of[s.rid]) if s.rid == promoted else (*rank(s), since_of[s.rid]))


class OraclePolicy(ContextPolicy):
    """BENCHMARKS ONLY. An upper reference: knows each sample's true length (``Sample.oracle_length``)
    and serves the longest remaining work first (exact LFS). Every other policy ignores that field."""

    name = "oracle"

    def rank_key(self):
        def rank(s: Sample) -> tuple:
            true_len = s.oracle_length if s.oracle_length is not None else s.params.max_new_tokens
            return (2, -(true_len - len(s.output_ids)))

        return rank


class GroupOraclePolicy(ContextPolicy):
    """BENCHMARKS ONLY. The bound of any group-level length estimate: knows each group's true longest
    sample (its samples' ``Sample.oracle_length``) and serves groups longest-first, every sample of a
    group alike, with no probes. ``context`` estimates exactly this; what separates this policy from
    ``oracle`` is how much lengths vary within a group, which no group estimate can see."""

    name = "group-oracle"

    def order(self, pending: list[Sample], buffer: RequestBuffer) -> list[Sample]:
        self._group_longest = true_group_longest(buffer)
        return super().order(pending, buffer)

    def rank_key(self):
        longest = self._group_longest

        def rank(s: Sample) -> tuple:
            return (2, -longest.get(s.group_id, s.params.max_new_tokens))

        return rank


class LateOraclePolicy(ContextPolicy):
    """BENCHMARKS ONLY. ``context`` with a perfect estimate: a group's true longest sample, known from
    the moment its first sample finishes (when ``context`` gets its first estimate), probes and all.
    What separates it from ``group-oracle`` is what no estimate learnt from finished siblings can
    know: which groups are long before any of their samples has finished."""

    name = "late-oracle"
    _true_longest: dict[str, int] = {}  # replaced, never changed in place, by each ``order``

    def order(self, pending: list[Sample], buffer: RequestBuffer) -> list[Sample]:
        self._true_longest = true_group_longest(buffer)
        return super().order(pending, buffer)

    def estimates(self) -> dict[str, int]:
        true = self._true_longest
        return {gid: true[gid] for gid in self._finished_longest if gid in true}


def true_group_longest(buffer: RequestBuffer) -> dict[str, int]:
    """Each live group's true longest sample (``Sample.oracle_length``; ``max_new_tokens`` where unknown)."""
    return {gid: max(s.oracle_length if s.oracle_length is not None else s.params.max_new_tokens
                     for s in group.samples)
            for gid, group in buffer.groups.items()}


POLICIES: dict[str, type[SchedulingPolicy]] = {
    p.name: p for p in (WholeGroupPolicy, RoundRobinPolicy, PerSamplePolicy, PowerOfTwoPolicy, CacheAwarePolicy,
                        ChunkedPolicy, ContextPolicy, OraclePolicy, GroupOraclePolicy, LateOraclePolicy)
}


def make_policy(name: str, **kwargs) -> SchedulingPolicy:
    """Build a policy by name; ``chunk_size``/``kv_headroom``/``starvation_bound`` go where they apply."""
    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r}; choose one of {sorted(POLICIES)}") from None
    import inspect

    accepted = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in kwargs.items() if k in accepted and v is not None})
