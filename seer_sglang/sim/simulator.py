"""Discrete-event simulation of a rollout on N instances.

The router side is the real thing: the frontend's sans-IO ``Router`` (``core.router``) with its
buffer, instance views and policy object, asked for decisions whenever a chunk comes back and told of
every chunk's end and every sample's finish. Only the engines are modelled: continuous batching with a step-time model, a KV capacity,
SGLang-like admission (a decaying new-token reservation ratio) and retraction when KV runs out,
and a radix cache (a continuation that stays on its instance, and siblings sharing a prompt there,
skip their cached prefill). With a ``SpecModel``, every step runs the engine's draft budget and each
request emits its expected accepted drafts on top of its token; where the model holds the text a run
replays, each verify step instead drafts that text with the instances' drafter and each instance's own
adaptive budget, one step at a time (``text_drafts.TextDrafts``).

Interactive requests with an SLO (``SLOArrival``) may arrive beside the rollout. With the SLO
mechanism on they take seer's path, through the same objects as the router and the instance plugin:
the router places each one whole (``Router.place_slo``), ``core.slo.screen`` applies the TTFT guard and VBS admission in
the instance's queue, ``plan_step`` (credit batching) picks each step's decode batch, and
``prefill_fits`` paces best-effort prefills. With it off they are plain SGLang's priority requests:
first in the queue, in every decode step.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import math
import os
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..config import MIN_SHARED_PREFILL, SLO_CONFIG
from ..core.migration import MigrationCost
from ..core.policy import InstanceView, SchedulingPolicy
from ..core.request import Group, Sample, SampleState, SamplingParams
from ..core.router import Launch, Router
from ..core.slo import SLO, CreditBatcher, Pace, Waiting, attainment, plan_step, prefill_fits, screen, step_time
from ..core.queue_order import group_first_order
from ..speculative.budget import BudgetRequest, high_priority, make_budget, verify_layout, verify_width
from .spec_model import SpecModel
from ..core.step_model import Admission, StepModel
from .workload import SLOArrival, TraceSample, sim_group_id, groups_of

MAX_MACRO_STEPS = 32  # decode steps simulated at once while the batch does not change


class TokenCount:
    """Stands in for ``Sample.output_ids`` in the simulator: policies only read its length."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def __len__(self) -> int:
        return self.n


@dataclass
class Slot:
    """A chunk on a simulated instance: the router's decision (given back to it when the chunk ends)
    and what the chunk has done there."""

    launch: Launch
    produced: int = 0
    slo: SLO | None = None  # an interactive request's, None for a rollout chunk
    arrival: SLOArrival | None = None
    first_s: float | None = None  # when its first token came out
    admitted: bool = False  # past the instance's SLO screening
    credit: float = 0.0  # expected tokens earned by its verify steps and not yet emitted (speculation)
    arrives: float = 0.0  # when the request reaches its instance's queue
    decode_steps: int = 0  # the decode (or verify) steps it ran
    # Tokens the chunk may make, ``produced`` included: its budget, or fewer where its sample's length
    # ends first. ``commit`` moves the chunk's and the sample's counts together, so this holds.
    limit: int = field(init=False)
    prompt_len: int = field(init=False)

    @property
    def sample(self) -> Sample:
        return self.launch.sample

    @property
    def budget(self) -> int:
        return self.launch.max_new_tokens

    @property
    def priority(self) -> int | None:
        return self.launch.priority

    @property
    def came(self) -> str:
        """Its sample's first chunk, or one that "stayed" on its instance or "moved" there."""
        return self.launch.came

    def __post_init__(self) -> None:
        target = self.sample.oracle_length or self.sample.params.max_new_tokens
        self.limit = min(self.budget, target - self.sample.generated + self.produced)
        self.prompt_len = len(self.sample.prompt_ids)

    @property
    def context(self) -> int:
        return self.prompt_len + self.sample.output_ids.n  # type: ignore[attr-defined]

    @property
    def steps_left(self) -> int:
        return self.limit - self.produced

    def emit(self, steps: int, rate: float) -> int:
        """Tokens that ``steps`` steps at ``rate`` expected tokens each emit, at least one a step and no
        more than the chunk has left. The fraction carries to the next steps: rounding each step's 1.4
        tokens to 1 would slow every sample that drafts below 1.5 tokens per step by up to 40%."""
        if rate == 1.0 and not self.credit:  # one token a step, no fraction to carry
            return min(self.limit - self.produced, steps)
        self.credit += steps * rate
        made = min(self.steps_left, max(steps, int(self.credit)))
        self.credit -= made
        return made

    def commit(self, tokens: int) -> None:
        """Count ``tokens`` new output tokens of this chunk and of its sample."""
        self.produced += tokens
        self.sample.output_ids.n += tokens  # type: ignore[attr-defined]


@dataclass
class SimInstance:
    index: int
    model: StepModel
    waiting: collections.deque = field(default_factory=collections.deque)
    running: list[Slot] = field(default_factory=list)
    cache: collections.OrderedDict = field(default_factory=collections.OrderedDict)  # key -> tokens (LRU)
    cache_group: dict = field(default_factory=dict)  # s:<rid> -> its group (whose prompt lies beneath)
    busy_until: float | None = None  # end of the step in progress; None = idle
    busy_time: float = 0.0
    retractions: int = 0
    prefill_tokens: int = 0
    pool_tokens: int = 0
    spec_tokens: int = 0  # tokens the decode steps emitted (speculation on; request_steps ran them)
    decode_steps: int = 0  # decode (or verify) steps run
    request_steps: int = 0  # the requests those steps ran, summed
    prefill_steps: int = 0  # prefill batches run (each admits one or more requests)
    prefill_time: float = 0.0  # their modelled time (pool loads included), part of busy_time
    new_token_ratio: float = Admission.init_ratio  # SGLang's reserve for future decode tokens (Admission)
    # SGLang's ``batch_is_full``: a request that found no KV room closes admission until a running
    # request leaves (or none runs), however far the reserve ratio falls meanwhile
    full: bool = False
    # Under SGLang's overlap scheduler, the requests that ended on their last step by a token it could
    # not foresee (EOS rather than ``max_new_tokens``): still in the batch SGLang formed before it saw
    # that token, holding their KV until the step after (``Simulation._step``)
    lingering: list[Slot] = field(default_factory=list)
    batcher: CreditBatcher = field(default_factory=CreditBatcher)
    best_effort_decoded: int = 0  # rollout request-steps while SLO requests ran
    best_effort_deferred: int = 0  # rollout request-steps that sat out for them

    def kv_held(self) -> int:
        """KV tokens the running (and lingering) requests hold: siblings share their prompt's pages
        (SGLang's radix cache), so a prompt counts once however many of its samples run; each reads it
        in full."""
        held = [*self.running, *self.lingering]
        prompts = {s.sample.group_id: s.prompt_len for s in held}
        return sum(prompts.values()) + sum(s.sample.output_ids.n for s in held)

    def cached(self, key: str) -> int:
        """Tokens cached under ``key``: ``p:<group>`` its prompt, ``s:<rid>`` a sample's whole context
        (its own tokens and, beneath them, its group's prompt)."""
        if key not in self.cache:
            return 0
        self.cache.move_to_end(key)
        if key.startswith("s:"):
            return self.cache[key] + self.cache.get(f"p:{self.cache_group[key]}", 0)
        return self.cache[key]

    def remember(self, key: str, tokens: int, group: str | None = None, prompt: int = 0) -> None:
        """Cache ``tokens`` under ``key``, least recently used out first, as SGLang's radix cache: a
        sample's context (``group`` given) is its own tokens below its group's prompt, which its
        siblings share, so the prompt counts once and leaves only after every sample cached below it
        (and with no sibling running here)."""
        if group is not None:
            self.cache_group[key] = group
            self.cache[f"p:{group}"] = prompt
            self.cache.move_to_end(f"p:{group}")
            tokens -= prompt
        self.cache[key] = tokens
        self.cache.move_to_end(key)
        total = sum(self.cache.values())
        if total <= self.model.capacity_tokens:
            return
        running = {s.sample.group_id for s in self.running}
        below = collections.Counter(self.cache_group[k] for k in self.cache if k.startswith("s:"))
        while total > self.model.capacity_tokens:
            victim = next((k for k in self.cache if k.startswith("s:")
                           or (k[2:] not in running and not below[k[2:]])), None)
            if victim is None:
                break
            if victim.startswith("s:"):
                below[self.cache_group[victim]] -= 1
            total -= self.cache[victim]
            self.forget(victim)

    def forget(self, key: str) -> None:
        """Drop ``key`` from the cache (evicted, or a retracted sample's freed KV); a prompt stays."""
        self.cache.pop(key, None)
        self.cache_group.pop(key, None)


@dataclass
class SimResult:
    policy: str
    instances: int
    completion_s: float
    total_tokens: int
    throughput_tok_s: float
    tail_s: float  # from 90% of samples finished to all finished
    idle_s_per_instance: float
    retractions: int
    prefill_tokens: int
    pool_tokens: int
    finish_times: list[float]
    lower_bound_s: float
    efficiency: float
    mean_acceptance_length: float | None = None
    slo: dict | None = None  # the interactive requests: attainment per class, admitted, rejected
    busy_s: list[float] = dataclasses.field(default_factory=list)  # per instance: time in steps
    decode_steps: list[int] = dataclasses.field(default_factory=list)  # per instance: decode or verify steps
    request_steps: list[int] = dataclasses.field(default_factory=list)  # per instance: requests in them, summed
    prefill_steps: list[int] = dataclasses.field(default_factory=list)  # per instance: prefill batches
    prefill_s: list[float] = dataclasses.field(default_factory=list)  # per instance: their time, part of busy_s
    committed: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # Simulation.committed

    def summary(self) -> dict:
        d = dataclasses.asdict(self)
        for per_instance in ("finish_times", "busy_s", "decode_steps", "request_steps", "prefill_steps", "prefill_s",
                             "committed"):
            d.pop(per_instance)
        return d


def shared_prefixes(prompts: Mapping[str, Sequence[int]]) -> dict[str, dict[str, int]]:
    """For each prompt, the others that start with the same tokens and for how many (only those sharing
    any): sorted, the common prefix of two prompts is the least of the adjacent ones' between them."""
    keys = sorted(prompts, key=lambda k: list(prompts[k]))
    adjacent = [len(os.path.commonprefix([list(prompts[a]), list(prompts[b])])) for a, b in zip(keys, keys[1:])]
    out: dict[str, dict[str, int]] = {k: {} for k in keys}
    for i, a in enumerate(keys):
        common = None
        for j in range(i + 1, len(keys)):
            common = adjacent[j - 1] if common is None else min(common, adjacent[j - 1])
            if common == 0:
                break
            out[a][keys[j]] = out[keys[j]][a] = common
    return out


class Simulation:
    def __init__(self, trace: list[TraceSample], policy: SchedulingPolicy, model: StepModel, instances: int,
                 max_tokens: int, pool: MigrationCost | None = None, spec: SpecModel | None = None,
                 admission: Admission = Admission(), slo_traffic: list[SLOArrival] = (),
                 slo_mechanism: bool = True, slo_headroom: float = SLO_CONFIG.headroom, plain: bool = False,
                 arrival_s: Mapping[tuple[int, int], float] | None = None,
                 prompts: Mapping[int, Sequence[int]] | None = None, overlap: bool | None = None):
        # A sample's first request reaches its instance this long after it is sent, by (group, sample
        # index) of the trace: a client that posts many requests at once delivers them over a while.
        self.arrival_s = dict(arrival_s or {})
        self.plain = plain  # instances without the seer plugin (plain SGLang's admission of siblings)
        # SGLang's overlap scheduler, under which a request that ends on EOS runs one more decode step
        # (``_step``). SGLang 0.5.23 runs it unless it speculates on CPU (``_disable_overlap_schedule_for_cpu``),
        # so by default (None) the instances overlap unless they speculate, as the emulated ones do.
        self.overlap = spec is None if overlap is None else bool(overlap)
        self.admission = admission
        self.spec = spec
        self.draft_budget = spec.budget(model) if spec is not None else None
        # On a replayed text: the instances' drafter over it, one verify step at a time (``TextDrafts``)
        self.text = spec.text_drafts(instances) if spec is not None else None
        # there each instance runs its own budget, as the emulated instances do (``make_budget``)
        self.budgets = [make_budget(spec.budget_name, spec.gamma_max, None, model, spec.budget_kv_read)
                        for _ in range(instances)] \
            if self.text is not None else []
        self.pool = pool  # a global KV pool: a continuation elsewhere loads its whole pages instead
        self.model = model
        self.step_s = step_time(model)  # the instances' step-time model, as the emulation's plugin has it
        self.router = Router(policy, [InstanceView(i, capacity_tokens=model.capacity_tokens,
                                                   step_s=self.step_s if slo_mechanism else None)
                                      for i in range(instances)], slo_headroom)
        self.slo_traffic = list(slo_traffic)
        self.slo_mechanism = slo_mechanism
        self.slo_headroom = slo_headroom
        self.arriving: dict[int, SLOArrival] = {}  # seq -> an interactive request on its way in
        self.slo_records: list[dict] = []
        self.slo_arrived = 0
        self.instances = [SimInstance(i, model, new_token_ratio=admission.init_ratio) for i in range(instances)]
        self.max_tokens = max_tokens
        self.now = 0.0
        self.events: list[tuple[float, int, int]] = []  # (time, seq, instance index | -1 = a chunk return)
        self.returning: dict[int, tuple[SimInstance, Slot]] = {}  # seq -> a chunk on its way back
        self.finishing: dict[int, float] = {}  # instance -> the end of its step under way, if a chunk ends there
        # Whether what the policy reads (the buffer, the instance views, its own state) changed since it
        # last placed nothing: a policy is a function of those, so asking again would place nothing.
        self.changed = True
        self._seq = 0
        self.finish_times: list[float] = []
        self.finished_in: collections.Counter = collections.Counter()  # group -> its samples finished
        # On a replayed text: tokens committed per request-step, by where the step falls in its chunk
        # (``benchmarks.step_log.committed_by_chunk_step`` reads the same of an emulated run)
        self.committed: dict[str, list[int]] = collections.defaultdict(list)
        self._scores: dict[float, list[float]] = {}  # acceptance -> its draft's scores
        self.groups = []
        self.group_of: dict[str, Group] = {}
        self.trace_key: dict[str, tuple[int, int]] = {}  # rid -> (group, sibling) in the trace
        for gid, members in groups_of(trace).items():
            params = SamplingParams(max_new_tokens=max_tokens)
            # a group's prompt tokens where the run's are given (a load balancer may route by them), else
            # stand-ins of the prompt's length
            prompt = list(prompts[gid]) if prompts and gid in prompts else [0] * members[0].prompt_len
            group = Group.make(sim_group_id(gid), prompt, len(members), params,
                               [m.output_len for m in members])
            for s, m in zip(group.samples, members):
                s.output_ids = TokenCount()  # type: ignore[assignment]
                self.trace_key[s.rid] = (gid, m.sample_index)
            self.groups.append(group)
            self.group_of[group.group_id] = group
        # The runs' prompts share leading tokens (a chat template at least), which SGLang's radix cache
        # matches across groups: by group, the other groups whose prompt starts the same and for how many
        # tokens (none where the prompts are stand-ins)
        self.shared_prefix = shared_prefixes({g.group_id: g.prompt_ids for g in self.groups}) if prompts else {}

    # ---- router side: the real policy ---------------------------------------------------------
    def dispatch(self) -> None:
        if not self.changed:
            return
        launches = self.router.schedule(self.now, slo=False).launches  # SLO requests are placed on arrival
        self.changed = bool(launches)  # a placement changes the views: the policy may place more
        for at, launch in enumerate(launches):
            inst = self.instances[launch.instance]
            sample = launch.sample
            delay = self.arrival_s.get(self.trace_key.get(sample.rid), 0.0) if launch.came == "first" else 0.0
            arrives = self.now + delay
            inst.waiting.append(Slot(launch, arrives=arrives))
            if arrives > self.now:
                self._push(arrives, inst.index)
            last_here = at + 1 == len(launches) or launches[at + 1].instance != inst.index
            if last_here and inst.busy_until is None:  # an idle instance starts a step now
                self._push(self.now, inst.index)

    def _return_chunk(self, inst: SimInstance, slot: Slot) -> None:
        sample = slot.sample
        self.router.chunk_ended(slot.launch, self.now)
        self.changed = True
        if slot.slo is not None:
            self._record_slo(slot.arrival, "admitted", slot.first_s, self.now, slot.produced)
            return
        slot.launch.chunk.new_tokens = slot.produced
        inst.remember(f"s:{sample.rid}", slot.context, sample.group_id, len(sample.prompt_ids))
        if self.pool is not None:
            sample.pool_tokens = self.pool.pooled(slot.context)
        target = sample.oracle_length or sample.params.max_new_tokens
        if sample.generated >= target:
            sample.finish_reason = "stop" if sample.generated < sample.params.max_new_tokens else "length"
            self.finished_in[sample.group_id] += 1
            self.router.finish(sample, SampleState.FINISHED, self.now)
            self.finish_times.append(self.now)
        else:
            self.router.requeue(sample)

    # ---- interactive requests with an SLO ----------------------------------------------------
    def _arrive(self, arrival: SLOArrival) -> None:
        """An SLO request reaches the router: seer places it whole where VBS admission holds (or
        refuses it); plain SGLang's client spreads them over the instances in turn."""
        self.slo_arrived += 1
        self.changed = True
        params = SamplingParams(max_new_tokens=arrival.output_len, slo=arrival.slo)
        rid = f"slo-{self.slo_arrived}"
        sample = Sample(rid=rid, group_id=rid, index=0, prompt_ids=[0] * arrival.prompt_len, params=params,
                        oracle_length=arrival.output_len)
        sample.output_ids = TokenCount()  # type: ignore[assignment]
        if self.slo_mechanism:
            launch = self.router.place_slo(sample, self.now)
            if not isinstance(launch, Launch):
                self._record_slo(arrival, "rejected_tpot")
                return
        else:
            launch = self.router.launch(sample, self.slo_arrived % len(self.instances), arrival.output_len, self.now)
        inst = self.instances[launch.instance]
        inst.waiting.appendleft(Slot(launch, slo=arrival.slo, arrival=arrival))
        if inst.busy_until is None:
            self._push(self.now, inst.index)

    def _record_slo(self, arrival: SLOArrival, outcome: str, first_s: float | None = None,
                    finished_s: float | None = None, tokens: int = 0) -> None:
        met = None
        if outcome == "admitted":
            met = attainment(arrival.slo, arrival.arrival_s, first_s, finished_s, tokens)
        self.slo_records.append({"class": arrival.slo_class, "phase": arrival.phase, "outcome": outcome,
                                 "met": None if met is None else met.met,
                                 "ttft_s": None if met is None else met.ttft_s,
                                 "tpot_s": None if met is None else met.tpot_s})

    def _screen_slo(self, inst: SimInstance) -> None:
        """The instance's queue before a prefill: SLO requests first, by deadline. Seer refuses the
        ones that would miss their TTFT or whose TPOT SLO would not hold (``core.slo.screen``)."""
        slo = [s for s in inst.waiting if s.slo is not None]
        if not slo:
            return
        rest = [s for s in inst.waiting if s.slo is None]
        if not self.slo_mechanism:
            inst.waiting = collections.deque(sorted(slo, key=lambda s: s.arrival.arrival_s) + rest)
            return
        fresh = {s.sample.rid: s for s in slo if not s.admitted}
        timed = [s for s in inst.running if s.slo is not None and s.slo.tpot_s is not None]
        verdict = screen([Waiting(rid, s.arrival.arrival_s, s.slo.ttft_s, self.model.prefill_batch([s.context], [0]),
                                  s.slo.tpot_s, s.context) for rid, s in fresh.items()],
                         [s.slo.tpot_s for s in timed], [s.context for s in timed], self.now, self.step_s,
                         self.slo_headroom)
        for rid, (_, which) in verdict.refused.items():
            slot = fresh[rid]
            self.router.chunk_ended(slot.launch, self.now)
            self._record_slo(slot.arrival, f"rejected_{which}")
        for rid in verdict.order:
            fresh[rid].admitted = True
        kept = [s for s in slo if s.admitted]
        inst.waiting = collections.deque(sorted(kept, key=lambda s: s.arrival.arrival_s + (s.slo.ttft_s or 0.0))
                                         + rest)

    def _paces(self, inst: SimInstance) -> dict[str, Pace]:
        """rid -> progress since its first token, for the running SLO requests past it."""
        return {s.sample.rid: Pace(s.slo.tpot_s, s.first_s, s.produced - 1) for s in inst.running
                if s.slo is not None and s.slo.tpot_s is not None and s.first_s is not None}

    # ---- engine side: the model --------------------------------------------------------------
    def _push(self, t: float, index: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, index))

    def _admit(self, inst: SimInstance) -> tuple[float, list[Slot]]:
        """SGLang's admission from the instance's queue (``Admission``); returns the prefill time it costs
        and the requests it admitted. Siblings whose prompt is not cached yet: plain SGLang's prefill
        batch computes it for each of them, the plugin's queue hook admits one and the rest a batch
        later (``plugin.queue_order``). Before each prefill batch the plugin re-sorts seer's queues by
        the router's priorities (``core.queue_order``); plain SGLang serves its queue first come, first
        served."""
        if not self.plain:
            order = group_first_order([(s.sample.group_id, s.sample.rid, s.priority) for s in inst.waiting])
            if order is not None:
                inst.waiting = collections.deque(inst.waiting[pos] for pos in order)
        self._screen_slo(inst)
        if not inst.running:
            inst.full = False
        if inst.full:
            return 0.0, []
        paces = list(self._paces(inst).values()) if self.slo_mechanism else []
        new, cached = [], []
        load_s = 0.0
        kv = inst.kv_held()
        held = {s.sample.group_id for s in inst.running}
        clip = self.admission.clip_max_new
        reserved = sum(int(inst.new_token_ratio * min(s.budget - s.produced, clip)) for s in inst.running)
        computing: dict[str, int] = {}  # group -> its uncached prompt tokens, which this prefill batch computes
        at = 0
        while at < len(inst.waiting) and len(inst.running) < self.model.max_running:
            slot = inst.waiting[at]
            if slot.arrives > self.now:
                at += 1  # not there yet
                continue
            sample = slot.sample
            again = computing.get(sample.group_id, 0)
            if again >= MIN_SHARED_PREFILL and not self.plain:
                at += 1  # the plugin leaves a sibling for the next batch, when its prompt is cached
                continue
            # Else SGLang computes (and holds, until the prefill ends) the prompt once per sibling.
            duplicate = again > 0
            own = sample.generated if sample.group_id in held and not duplicate else slot.context
            need = own + min(slot.budget, clip)
            if inst.running and kv + reserved + need > self.model.capacity_tokens:
                inst.full = True  # SGLang's NO_TOKEN: no prefill again until a request leaves
                break
            # what another group's cached prompt holds of this one's (not a prompt this batch computes)
            shared = self._shared_hit(inst, sample.group_id, computing)
            prompt_hit = shared if duplicate else \
                max(shared, min(inst.cached(f"p:{sample.group_id}"), len(sample.prompt_ids)))
            hit = max(inst.cached(f"s:{sample.rid}"), prompt_hit)
            if slot.slo is None and paces and not prefill_fits(
                    paces, self.now, self.model.prefill_batch([*new, max(0, slot.context - hit)],
                                                              [*cached, min(hit, slot.context)])):
                break  # a best-effort prefill waits until the SLO requests have banked its time
            del inst.waiting[at]
            if hit < len(sample.prompt_ids):
                computing.setdefault(sample.group_id, len(sample.prompt_ids) - hit)
            if self.pool is not None and sample.pool_tokens > hit:
                load_s += self.pool.move_s(sample.pool_tokens - hit, sample.pool_tokens - hit)
                inst.pool_tokens += sample.pool_tokens - hit
                hit = sample.pool_tokens
            new.append(max(0, slot.context - hit))
            cached.append(min(hit, slot.context))
            inst.remember(f"p:{sample.group_id}", len(sample.prompt_ids))
            inst.running.append(slot)
            kv += own
            held.add(sample.group_id)
            reserved += min(slot.budget, clip)
        inst.prefill_tokens += sum(new)
        return self.model.prefill_batch(new, cached) + load_s, inst.running[len(inst.running) - len(new):]

    def _shared_hit(self, inst: SimInstance, group: str, computing: Mapping[str, int]) -> int:
        """The tokens of ``group``'s prompt that SGLang's radix cache matches on ``inst`` in other groups'
        cached prompts, leaving out those this prefill batch computes (not in the cache until it ends)."""
        best = 0
        for other, tokens in self.shared_prefix.get(group, {}).items():
            if tokens > best and other not in computing:
                best = max(best, min(tokens, inst.cache.get(f"p:{other}", 0)))
        return best

    def _retract_until_fits(self, inst: SimInstance) -> None:
        """Like SGLang: when the next step's KV does not fit, retract requests back to the queue.

        SGLang 0.5.23 (``ScheduleBatch._get_decode_retraction_order``) retracts the request with the
        fewest output tokens first (a chunk's output is its own request's), the longest input among
        equals: the least work lost. Its stable sort leaves equal requests in batch order and retracts
        from the end: the latest admitted of them goes first. The scheduler appends a retracted
        request to the end of its waiting queue (``Scheduler._add_request_to_queue``), behind the
        requests already waiting, and FCFS keeps that order."""
        retracted = False
        while len(inst.running) > 1 and inst.kv_held() + len(inst.running) > self.model.capacity_tokens:
            at = min(range(len(inst.running)), key=lambda i: (inst.running[i].produced,
                                                             -(inst.running[i].context - inst.running[i].produced), -i))
            victim = inst.running.pop(at)
            inst.forget(f"s:{victim.sample.rid}")  # its KV is freed: re-prefill later
            inst.waiting.append(victim)
            inst.retractions += 1
            self.router.retracted(inst.index)
            self.changed = True
            retracted = True
        if retracted:
            inst.full = False  # the batch shrank: SGLang tries a prefill again
            written = sum(s.produced for s in inst.running)
            budgets = sum(s.budget for s in inst.running)
            inst.new_token_ratio = min(1.0, (written + self.admission.retract_steps * len(inst.running))
                                       / (budgets + 1))

    def _step(self, inst: SimInstance) -> None:
        """Start the next (macro) step of an instance at ``now``.

        Under SGLang's overlap scheduler the next batch is formed before the last step's tokens are
        processed. A request whose last token was predictable (its ``max_new_tokens``-th) is left out
        of it (``Scheduler._reqs_finishing_inflight``); one that ended on EOS is not: it holds its KV
        through this step's admission, runs this decode step (its KV read, its token discarded) and
        leaves when SGLang processes the last step's tokens, after this step, or after the prefill if
        this step prefills first. Its answer goes out then."""
        prefill_s, admitted = self._admit(inst)
        if admitted:
            inst.prefill_steps += 1
            inst.prefill_time += prefill_s
            for slot in inst.lingering:  # the prefill ran first: they leave before the next decode
                self._send_back(inst, slot, self.now + prefill_s)
            inst.lingering = []
        self._retract_until_fits(inst)
        ghosts, inst.lingering = inst.lingering, []
        if ghosts and not inst.running:  # only they are left: SGLang runs their decode step all the same
            dt = self.model.decode_step(len(ghosts), sum(s.context for s in ghosts),
                                        longest=max(s.context for s in ghosts))
            self._decoded(inst, 1, len(ghosts), dt)
            for slot in ghosts:
                self._send_back(inst, slot, inst.busy_until)
            return
        if not inst.running:
            inst.busy_until = None
            if not inst.waiting:  # SGLang's on_idle
                inst.new_token_ratio = self.admission.init_ratio
            return
        decoding = self._slo_batch(inst)
        # A prefill samples the next token of each request it admitted (SGLang's extend step), without a
        # decode step or drafts: a chunk's first token, and a retracted request's next one.
        running = {id(s) for s in inst.running} if admitted else ()
        for slot in admitted:
            if id(slot) in running and slot.steps_left > 0:
                slot.commit(1)
                self._feed(slot, inst, self.now + prefill_s)
        decoding = [s for s in decoding if s.steps_left > 0]
        if not decoding:  # the prefill finished every request it ran
            inst.busy_time += prefill_s
            inst.busy_until = self.now + prefill_s
            self._push(inst.busy_until, inst.index)
            self._note_finishing(inst)
            return
        rates, drafts, verified = self._spec_rates(decoding, inst)
        steps = min(MAX_MACRO_STEPS, min(math.ceil(s.steps_left / r) for s, r in zip(decoding, rates)))
        if ghosts:
            steps = 1  # they leave after this step
        batch, kv = len(decoding) + len(ghosts), sum(s.context for s in [*decoding, *ghosts])
        if self.slo_traffic and (any(s.slo is not None for s in inst.running)
                                 or any(s.slo is not None for s in inst.waiting)):
            steps = 1  # interactive requests: every token's time counts
        if admitted and inst.waiting:
            steps = 1  # SGLang's next prefill batch comes right after this one: the prompt it computed is cached
        if self.text is not None:
            steps = 1  # each verify step drafts from the text its siblings have written by then
        steps = max(1, min(steps, (self.model.capacity_tokens - kv) // batch))
        extra_s = self.spec.token_cost(self.model) * drafts if self.spec is not None else 0.0

        longest, longest_rate = max(((s.context, r) for s, r in [*zip(decoding, rates), *((g, 1.0) for g in ghosts)]),
                                    key=lambda x: x[0])

        def span(k: int) -> float:
            return prefill_s + self.model.decode_steps(k, batch, kv, batch + drafts, sum(rates) + len(ghosts),
                                                       longest, longest_rate) + k * extra_s

        steps = self._until_next_event(inst, steps, span)
        dt = span(steps)
        if verified is not None:  # the instance's budget learns from its own verify step
            self.budgets[inst.index].record_step(*verified, dt - prefill_s)
        for slot, rate in zip(decoding, rates):
            made = slot.emit(steps, rate)
            slot.commit(made)
            slot.decode_steps += steps
            if self.text is not None and slot.steps_left > 0:
                # one verify step, as the step log shows it: a chunk's last step has no next one to count by
                self.committed[f"{slot.came}, step {'1' if slot.decode_steps == 1 else '2+'}"].append(made)
            self._feed(slot, inst, self.now + dt)
            if self.spec is not None:
                inst.spec_tokens += made
        self._decoded(inst, steps, batch, dt)
        for slot in ghosts:
            self._send_back(inst, slot, inst.busy_until)

    def _decoded(self, inst: SimInstance, steps: int, batch: int, dt: float) -> None:
        """Account ``steps`` decode steps of ``batch`` requests, ``dt`` from now, and wake the instance then."""
        inst.new_token_ratio = max(self.admission.min_ratio, inst.new_token_ratio - self.admission.decay * steps)
        inst.decode_steps += steps
        inst.request_steps += steps * batch
        inst.busy_time += dt
        inst.busy_until = self.now + dt
        self._push(inst.busy_until, inst.index)
        self._note_finishing(inst)

    def _note_finishing(self, inst: SimInstance) -> None:
        if any(s.limit <= s.produced for s in inst.running):
            self.finishing[inst.index] = inst.busy_until
        else:
            self.finishing.pop(inst.index, None)

    def _until_next_event(self, inst: SimInstance, steps: int, span) -> int:
        """A span of decode steps ends at the first step boundary after the router may next send this
        instance work: a chunk that ends elsewhere (its continuation, or the KV it frees), one reaching
        the router, an SLO request arriving. SGLang reads new requests between two steps, so work that
        arrives mid-step joins after it. (Ending a span at every step end elsewhere as well, where
        the router decides again on the samples' progress, moves the checks by up to 3 points and
        makes a 32-instance run 7.5x slower.)"""
        upcoming = [t for index, t in self.finishing.items() if index != inst.index and t > self.now]
        upcoming += [t for t, _, index in self.events if index < 0 and t >= self.now]
        if self.arrival_s:
            upcoming += [s.arrives for s in inst.waiting if s.arrives > self.now]
        if steps <= 1 or not upcoming or span(steps) <= min(upcoming) - self.now:
            return steps
        wait = min(upcoming) - self.now
        low, high = 1, steps  # the fewest steps whose span reaches the event
        while low < high:
            mid = (low + high) // 2
            low, high = (mid + 1, high) if span(mid) < wait else (low, mid)
        return low

    def _slo_batch(self, inst: SimInstance) -> list[Slot]:
        """This step's decode batch: with SLO requests running and the mechanism on, credit batching
        (``plan_step``); the requests admitted this step always run (their prefill makes a token)."""
        if not self.slo_mechanism or not any(s.slo is not None for s in inst.running):
            return inst.running
        old = [s for s in inst.running if s.first_s is not None or s.produced > 0]
        slo = [s for s in old if s.slo is not None and s.slo.tpot_s is not None]
        if not slo:
            return inst.running
        decision = plan_step(inst.batcher, {s.sample.rid: s.slo.tpot_s if s.slo is not None else None for s in old},
                             {s.sample.rid: s.context for s in old}, self.step_s, self.slo_headroom,
                             self._paces(inst), self.now)
        chosen = set(decision.decode)
        inst.best_effort_decoded += sum(1 for s in old if s.slo is None and s.sample.rid in chosen)
        inst.best_effort_deferred += sum(1 for s in old if s.slo is None and s.sample.rid not in chosen)
        return [s for s in inst.running if s.sample.rid in chosen or s not in old] or inst.running

    def _feed(self, slot: Slot, inst: SimInstance, at: float) -> None:
        """The replayed text's drafters take the tokens a request committed in the step that ends at
        ``at``: its instance's drafter for its next step, the others' through the draft server's sync."""
        key = self.trace_key.get(slot.sample.rid)
        if self.text is not None and key in self.text.texts:
            self.text.feed(key, slot.sample.rid, slot.sample.generated, inst.index, at)

    def _spec_rates(self, running: list[Slot], inst: SimInstance) -> tuple[list[float], int, tuple | None]:
        """Expected tokens per step of each running request, and the draft tokens a step verifies. On a
        replayed text: the tokens each commits in this one verify step, the draft tokens the step
        computes (a ragged verify: those given out; a padded one: every request at the step's width),
        and what the instance's budget records of the step once its time is known (``record_step``'s
        arguments but the time); else None."""
        if self.spec is None:
            return [1.0] * len(running), 0, None
        keys = [self.trace_key.get(slot.sample.rid) for slot in running]
        if self.text is not None and self.text.covers(keys):
            high = high_priority([slot.priority for slot in running])
            made, verified, gamma = self.text.verify([(key, slot.sample.rid, slot.sample.generated)
                                                      for key, slot in zip(keys, running)], high,
                                                     self.budgets[inst.index], inst.index, self.now,
                                                     sum(slot.context for slot in running))
            width = self._verify_width(1 + max(verified, default=0))
            record = (len(running), gamma if width > 1 else 0, verified, [m - 1 for m in made])
            ragged = verify_layout(self.spec.verify_layout, cpu=True) == "ragged"
            return [float(m) for m in made], sum(verified) if ragged else len(running) * (width - 1), record
        scores = []
        for slot in running:
            group = self.group_of[slot.sample.group_id]
            alpha = self.spec.sample_alpha(self.spec.alpha(self.finished_in[group.group_id], len(group.samples)),
                                           self.trace_key.get(slot.sample.rid))
            if alpha not in self._scores:
                self._scores[alpha] = self.spec.draft_scores(alpha)
            scores.append(self._scores[alpha])
        high = high_priority([slot.priority for slot in running])
        asks = [BudgetRequest(str(i), high[i], sc) for i, sc in enumerate(scores)]
        given = self.draft_budget.allocate(asks, len(running),
                                           kv_tokens=sum(slot.context for slot in running)).per_request
        counts = [given[str(i)] for i in range(len(running))]
        rates = [1.0 + sum(sc[:k]) for sc, k in zip(scores, counts)]
        if self.spec.verify_layout == "bucketed":  # every request padded to the step's bucket
            return rates, len(running) * (self._verify_width(1 + max(counts, default=0)) - 1), None
        return rates, sum(counts), None  # a ragged verify: the drafts given out

    def _verify_width(self, needed: int) -> int:
        """A verify step's width for its widest request's ``needed`` nodes, in the instances' layout
        (``auto``: ragged, as on the CPU the emulated instances run on)."""
        return verify_width(verify_layout(self.spec.verify_layout, cpu=True), needed, self.spec.gamma_max + 1)

    def _finish_step(self, inst: SimInstance) -> None:
        """Finished chunks reach the router ``request_overhead_s`` later (HTTP, detokenizing), and in
        any case after the instance has started its next step: SGLang sends a finished request's
        output and goes on, so a continuation, even one sent back to the same instance, misses at
        least that step."""
        for slot in inst.running:
            if slot.first_s is None and slot.produced > 0:
                slot.first_s = self.now
        done = [s for s in inst.running if s.steps_left <= 0]
        inst.running = [s for s in inst.running if s.steps_left > 0]
        if done:
            inst.full = False  # a request left the batch: SGLang tries a prefill again
        for slot in done:
            if slot.slo is not None:
                self._return_chunk(inst, slot)
            elif self.overlap and slot.produced < slot.budget:
                inst.lingering.append(slot)  # ended on EOS: SGLang sees it a step late (``_step``)
            else:
                self._send_back(inst, slot, self.now)

    def _send_back(self, inst: SimInstance, slot: Slot, at: float) -> None:
        """A finished chunk reaches the router ``request_overhead_s`` after ``at`` (HTTP, detokenizing)."""
        self._push(at + self.model.request_overhead_s, -1)
        self.returning[self._seq] = (inst, slot)

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> SimResult:
        for group in self.groups:
            self.router.submit(group)
        for arrival in self.slo_traffic:
            self._push(arrival.arrival_s, -2)
            self.arriving[self._seq] = arrival
        self.dispatch()
        while self.events:
            t, seq, index = heapq.heappop(self.events)
            if index == -2:
                self.now = t
                self._arrive(self.arriving.pop(seq))
                continue
            if index < 0:
                self.now = t
                self._return_chunk(*self.returning.pop(seq))
                self.dispatch()
                continue
            inst = self.instances[index]
            if inst.busy_until is not None and t < inst.busy_until:
                continue  # a stale wake-up: the instance is mid-step
            self.now = t
            if inst.busy_until is not None:
                self._finish_step(inst)
                inst.busy_until = None
                self.dispatch()
            if inst.busy_until is None:
                self._step(inst)
        return self._result()

    def _result(self) -> SimResult:
        samples = [s for g in self.groups for s in g.samples]
        assert all(s.done for s in samples), "simulation ended with unfinished samples"
        total = sum(s.generated for s in samples)
        times = sorted(self.finish_times)
        completion = times[-1]
        p90 = times[max(0, int(0.9 * len(times)) - 1)]
        n = len(self.instances)
        peak = self._peak_throughput()
        longest = max(s.generated for s in samples)
        bound = max(total / peak, longest * self.model.decode_step(1, 0))
        return SimResult(policy=self.router.policy.name, instances=n, completion_s=completion, total_tokens=total,
                         throughput_tok_s=total / completion, tail_s=completion - p90,
                         idle_s_per_instance=sum(completion - i.busy_time for i in self.instances) / n,
                         retractions=sum(i.retractions for i in self.instances),
                         prefill_tokens=sum(i.prefill_tokens for i in self.instances),
                         pool_tokens=sum(i.pool_tokens for i in self.instances), finish_times=times,
                         lower_bound_s=bound, efficiency=bound / completion,
                         mean_acceptance_length=self._acceptance(), slo=self._slo_summary(),
                         busy_s=[i.busy_time for i in self.instances],
                         decode_steps=[i.decode_steps for i in self.instances],
                         prefill_steps=[i.prefill_steps for i in self.instances],
                         prefill_s=[i.prefill_time for i in self.instances],
                         request_steps=[i.request_steps for i in self.instances], committed=dict(self.committed))

    def _slo_summary(self) -> dict | None:
        if not self.slo_traffic:
            return None

        def summary(records: list[dict]) -> dict:
            admitted = [r for r in records if r["outcome"] == "admitted"]
            met = sum(1 for r in admitted if r["met"])
            return {"requests": len(records), "admitted": len(admitted), "rejected": len(records) - len(admitted),
                    "met": met, "slo_attainment": met / len(admitted) if admitted else None}

        decoded = sum(i.best_effort_decoded for i in self.instances)
        deferred = sum(i.best_effort_deferred for i in self.instances)
        classes = sorted({r["class"] for r in self.slo_records})
        phases = sorted({r["phase"] for r in self.slo_records})
        return {**summary(self.slo_records), "mechanism": self.slo_mechanism,
                "per_class": {c: summary([r for r in self.slo_records if r["class"] == c]) for c in classes},
                "per_phase": [summary([r for r in self.slo_records if r["phase"] == p]) for p in phases],
                "best_effort_deferred_share": deferred / (decoded + deferred) if decoded + deferred else 0.0}

    def _acceptance(self) -> float | None:
        if self.spec is None:
            return None
        steps = sum(i.request_steps for i in self.instances)
        return sum(i.spec_tokens for i in self.instances) / steps if steps else None

    def _peak_throughput(self) -> float:
        """Cluster tokens/s at the best batch size that fits the KV of an average sample."""
        samples = [s for g in self.groups for s in g.samples]
        avg_ctx = sum(len(s.prompt_ids) + s.generated / 2 for s in samples) / len(samples)
        best = 0.0
        for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
            if batch > self.model.max_running or batch * avg_ctx > self.model.capacity_tokens:
                break
            best = max(best, batch / self.model.decode_step(batch, int(batch * avg_ctx)))
        return best * len(self.instances)


def simulate(trace: list[TraceSample], policy: SchedulingPolicy, model: StepModel, instances: int,
             max_tokens: int, pool: MigrationCost | None = None, spec: SpecModel | None = None,
             admission: Admission = Admission(), slo_traffic: list[SLOArrival] = (), slo_mechanism: bool = True,
             slo_headroom: float = SLO_CONFIG.headroom, plain: bool = False,
             arrival_s: Mapping[tuple[int, int], float] | None = None,
             prompts: Mapping[int, Sequence[int]] | None = None, overlap: bool | None = None) -> SimResult:
    """``plain``: the instances run SGLang without the seer plugin (the baseline). ``arrival_s``: when
    each sample's first request reaches its instance, by (group, sample index); at once by default.
    ``prompts``: each group's prompt tokens, by group id (default: stand-ins of the trace's lengths).
    ``overlap``: model SGLang's overlap scheduler (True), not (False), or as SGLang 0.5.23 runs it on
    the emulated instances' CPU (None, the default: unless speculating)."""
    return Simulation(trace, policy, model, instances, max_tokens, pool, spec, admission, slo_traffic,
                      slo_mechanism, slo_headroom, plain, arrival_s, prompts, overlap).run()
