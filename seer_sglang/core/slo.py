"""SLO-aware requests beside a rollout (SCORPIO): who decodes each step, who is admitted, who waits.

Rollout samples want throughput; evaluation, judge and interactive requests that share the
instances want a time per output token (TPOT) and a time to first token (TTFT) they can rely on.
Three pure mechanisms, decisions as plain dataclasses, no clock and no I/O of their own:

- **Credit batching** (:class:`CreditBatcher`). A request with TPOT SLO ``STP(r)`` has the relative
  proportionality ``TRP(r) = min STP / STP(r)`` among the running SLO requests. Each step it gains
  ``TRP(r)`` credit and decodes when it holds 1, paying 1: the strictest decodes every step, one
  with twice its SLO every second step. A request that skips a step keeps its KV. Best-effort
  requests (rollout samples, no SLO) fill the room the SLO requests' pace leaves in the step
  (:func:`step_budget`: a TPOT SLO is a mean, so a request that ran ahead lends its banked time to a
  larger step, and one behind gets a smaller one).
- **VBS admission** (:func:`admit`). The virtual batch size ``VBS = sum TRP`` is the expected
  number of requests in a step. A newcomer is admitted only if a step of ``VBS`` sequences at the
  average context still meets the smallest TPOT SLO, by the instance's step-time model.
- **TTFT guard** (:func:`order_waiting`). Waiting SLO requests go least slack first; one that can no
  longer make its TTFT is rejected early, with a reason, instead of being served late.

The step-time model is any ``step_s(batch, kv_tokens_per_sequence) -> seconds``: the simulator's
and the emulation's :class:`~seer_sglang.core.step_model.StepModel` (:func:`step_time`), or the
draft budget's fitted :class:`~seer_sglang.speculative.budget.CostModel`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

from ..config import SLO_CONFIG
from .step_model import StepModel

StepTime = Callable[[float, float], float]  # (sequences in the step, KV tokens each) -> seconds

EPS = 1e-9  # credit rounding: three steps of TRP 1/3 make one whole credit


def step_time(model: StepModel) -> StepTime:
    """A decode step of ``batch`` sequences with ``kv`` KV tokens each, by the simulator's model."""
    return lambda batch, kv: model.decode_step(batch, batch * kv, longest=int(kv))


def fitted_step_time(base_s: float, per_seq_s: float) -> StepTime:
    """A plain decode step by an instance's own fit (the draft budget's ``CostModel`` at one token per
    request: ``base_s`` and ``per_seq_s`` with its per-token term folded in); it has no KV term."""
    return lambda batch, kv: base_s + per_seq_s * batch


@dataclass(frozen=True)
class SLO:
    """A request's service objectives; ``None`` fields are best-effort."""

    ttft_s: Optional[float] = None
    tpot_s: Optional[float] = None

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0, not {value!r}")


def proportionality(tpots: Mapping[str, float]) -> dict[str, float]:
    """``TRP(r) = min over r' of STP(r') / STP(r)``, in (0, 1], for every request with a TPOT SLO."""
    if not tpots:
        return {}
    strictest = min(tpots.values())
    return {rid: strictest / tpot for rid, tpot in tpots.items()}


@dataclass(frozen=True)
class StepBatch:
    """One decode step: the requests that run in it, and the running ones that sit it out."""

    decode: list[str]
    skipped: list[str]


@dataclass
class CreditBatcher:
    """Per-step decode batches by credit; one object per instance, called once per decode step."""

    credits: dict[str, float] = field(default_factory=dict)

    def step(self, running: Mapping[str, Optional[float]], best_effort_room: Optional[int] = None) -> StepBatch:
        """``running``: rid -> TPOT SLO in seconds (``None``: best-effort), in queue order. SLO
        requests whose credit reaches 1 decode; then best-effort requests, in order, up to
        ``best_effort_room`` (``None``: all of them)."""
        tpots = {rid: tpot for rid, tpot in running.items() if tpot is not None}
        self.credits = {rid: c for rid, c in self.credits.items() if rid in tpots}
        decode: list[str] = []
        for rid, trp in proportionality(tpots).items():
            credit = self.credits.get(rid, 0.0) + trp
            if credit >= 1.0 - EPS:
                credit -= 1.0
                decode.append(rid)
            self.credits[rid] = credit
        best_effort = [rid for rid, tpot in running.items() if tpot is None]
        room = len(best_effort) if best_effort_room is None else max(0, best_effort_room)
        decode += best_effort[:room]
        chosen = set(decode)
        return StepBatch(decode, [rid for rid in running if rid not in chosen])


def virtual_batch(tpots: Sequence[float]) -> tuple[float, float]:
    """(the tightest TPOT SLO, VBS = the sum of the requests' TRP) of SLO requests with ``tpots``."""
    bound = min(tpots)
    return bound, sum(bound / t for t in tpots)


def best_effort_room(tpots: Sequence[float], slo_kv_tokens: float, step_s: StepTime, best_effort_kv: Sequence[float],
                     headroom: float = SLO_CONFIG.headroom, budget_s: Optional[float] = None) -> Optional[int]:
    """How many best-effort sequences, taken in order with contexts ``best_effort_kv``, may share a step
    with SLO requests of TPOT SLOs ``tpots`` (mean context ``slo_kv_tokens``) while the step takes at
    most ``budget_s`` (default: ``headroom`` of the tightest SLO; :func:`step_budget` paces it);
    ``None`` without SLO requests. The step reads the KV of every sequence in it: a long rollout sample
    costs more room than a short one."""
    if not tpots:
        return None
    bound, vbs = virtual_batch(tpots)
    limit = headroom * bound if budget_s is None else budget_s
    kv_total = vbs * slo_kv_tokens
    room = 0
    for kv in best_effort_kv:
        kv_total += kv
        batch = vbs + room + 1
        if step_s(batch, kv_total / batch) > limit:
            break
        room += 1
    return room


def step_budget(tpots: Mapping[str, float], paces: Mapping[str, Pace], now_s: float,
                headroom: float = SLO_CONFIG.headroom) -> float:
    """The time the next decode step may take so that every running SLO request keeps, on average over
    its tokens, to ``headroom`` of its TPOT SLO.

    The SLO is a mean: a request judged by ``(last - first) / (tokens - 1)`` does not need every step
    under ``headroom`` of it, only its pace. A request that has run ahead (steps cheaper than their
    budget, no best-effort rows to fill them) may spend the time it banked on a larger step; one that
    fell behind (a prefill between steps, a step longer than the model said) gets a smaller one, down
    to none of the best-effort rows. The model's errors and the prefills between steps are so paid
    back from measured time instead of a fixed margin. A request decoding every ``1 / TRP`` steps gets
    ``TRP`` of its allowance per step; one without a pace yet allows ``headroom`` of its SLO. No step
    is planned longer than the tightest SLO."""
    bound = min(tpots.values())
    allowances = [trp * (paces[rid].since_s + (paces[rid].tokens + 1) * tpots[rid] * headroom - now_s)
                  if rid in paces else headroom * bound for rid, trp in proportionality(tpots).items()]
    return min(bound, *allowances)


@dataclass(frozen=True)
class Admission:
    admitted: bool
    virtual_batch: float  # VBS with the newcomer
    estimated_tpot_s: float  # of the strictest request, decoding every step of that batch
    bound_s: float  # the smallest TPOT SLO among the running requests and the newcomer
    reason: str


def admit(running_tpots: Sequence[float], running_kv: Sequence[float], tpot_s: float, kv_tokens: float,
          step_s: StepTime, headroom: float = SLO_CONFIG.headroom) -> Admission:
    """VBS admission of a request with TPOT SLO ``tpot_s`` and ``kv_tokens`` of context, beside SLO
    requests with ``running_tpots`` and ``running_kv``; a step may take ``headroom`` of the tightest
    SLO. Best-effort requests do not count: they only fill the room the SLO requests leave
    (:func:`best_effort_room`)."""
    tpots = [*running_tpots, tpot_s]
    kvs = [*running_kv, kv_tokens]
    bound, vbs = virtual_batch(tpots)
    estimate = step_s(vbs, sum(kvs) / len(kvs))
    ok = estimate <= headroom * bound
    reason = (f"a step of {vbs:.2f} virtual sequences takes {estimate * 1e3:.1f} ms, "
              f"{'within' if ok else 'over'} the tightest TPOT SLO of {bound * 1e3:.1f} ms")
    return Admission(ok, vbs, estimate, bound, reason)


@dataclass(frozen=True)
class Waiting:
    rid: str
    arrival_s: float
    ttft_s: Optional[float]  # None: best-effort
    prefill_s: float  # the instance's estimate of its prefill
    tpot_s: Optional[float] = None  # its TPOT SLO, for VBS admission (None: none)
    kv_tokens: float = 0.0  # its context


@dataclass(frozen=True)
class WaitingOrder:
    order: list[str]  # SLO requests least slack first, then best-effort ones in arrival order
    rejected: dict[str, str]  # rid -> why it cannot make its TTFT any more


def order_waiting(waiting: Sequence[Waiting], now_s: float) -> WaitingOrder:
    """Deadline order for prefill, and early rejection of the requests that would be served late."""
    timed, rejected = [], {}
    for w in waiting:
        if w.ttft_s is None:
            continue
        slack = w.arrival_s + w.ttft_s - now_s - w.prefill_s
        if slack < 0:
            rejected[w.rid] = (f"TTFT SLO of {w.ttft_s * 1e3:.0f} ms cannot be met: waited "
                               f"{(now_s - w.arrival_s) * 1e3:.0f} ms, prefill needs {w.prefill_s * 1e3:.0f} ms")
        else:
            timed.append((slack, w.arrival_s, w.rid))
    best_effort = sorted((w for w in waiting if w.ttft_s is None), key=lambda w: w.arrival_s)
    return WaitingOrder([rid for _, _, rid in sorted(timed)] + [w.rid for w in best_effort], rejected)


@dataclass(frozen=True)
class Screening:
    order: list[str]  # the admitted and the best-effort, in prefill order (``order_waiting``)
    refused: dict[str, tuple[str, str]]  # rid -> (why, which SLO: "ttft" or "tpot")


def screen(waiting: Sequence[Waiting], running_tpots: Sequence[float], running_kv: Sequence[float], now_s: float,
           step_s: Optional[StepTime], headroom: float = SLO_CONFIG.headroom) -> Screening:
    """An instance's waiting queue before a prefill: the TTFT guard, then VBS admission in deadline
    order, each admitted request counting against the next. Without a step-time model yet, only the
    TTFT guard applies."""
    guard = order_waiting(waiting, now_s)
    refused = {rid: (why, "ttft") for rid, why in guard.rejected.items()}
    if step_s is not None:
        tpots, kvs = list(running_tpots), list(running_kv)
        by_rid = {w.rid: w for w in waiting}
        for rid in guard.order:
            w = by_rid[rid]
            if w.tpot_s is None:
                continue
            verdict = admit(tpots, kvs, w.tpot_s, w.kv_tokens, step_s, headroom)
            if verdict.admitted:
                tpots.append(w.tpot_s)
                kvs.append(w.kv_tokens)
            else:
                refused[rid] = (f"TPOT SLO of {w.tpot_s * 1e3:g} ms cannot be met: {verdict.reason}", "tpot")
    return Screening([rid for rid in guard.order if rid not in refused], refused)


def plan_step(batcher: CreditBatcher, running: Mapping[str, Optional[float]], kv_tokens: Mapping[str, float],
              step_s: StepTime, headroom: float = SLO_CONFIG.headroom, paces: Mapping[str, Pace] | None = None,
              now_s: float = 0.0) -> StepBatch:
    """One decode step of an instance: ``running`` is rid -> TPOT SLO (``None``: best-effort), in
    queue order, ``kv_tokens`` rid -> context, ``paces`` rid -> the SLO requests' progress at ``now_s``.
    Without SLO requests every request decodes; with them, credit batching, and best-effort requests
    fill, in order, the room the step's budget leaves (:func:`step_budget`, :func:`best_effort_room`)."""
    slo = {rid: t for rid, t in running.items() if t is not None}
    if not slo:
        batcher.credits.clear()
        return StepBatch(list(running), [])
    budget = step_budget(slo, paces or {}, now_s, headroom)
    room = best_effort_room(list(slo.values()), sum(kv_tokens[rid] for rid in slo) / len(slo), step_s,
                            [kv_tokens[rid] for rid, t in running.items() if t is None], headroom, budget)
    return batcher.step(running, room)


@dataclass(frozen=True)
class Pace:
    """A running SLO request's progress: since ``since_s`` it has decoded ``tokens`` tokens."""

    tpot_s: float
    since_s: float
    tokens: int

    def slack_s(self, now_s: float) -> float:
        """Time banked against its TPOT SLO: positive when it runs ahead of one token per SLO."""
        return self.since_s + self.tokens * self.tpot_s - now_s


def prefill_fits(paces: Sequence[Pace], now_s: float, prefill_s: float) -> bool:
    """Whether a best-effort prefill of ``prefill_s`` may run between decode steps: every running SLO
    request has banked at least that much time against its TPOT SLO. Steps that take less than the
    SLO (``headroom``) bank time; a prefill spends it. Without SLO requests it always may."""
    return all(p.slack_s(now_s) >= prefill_s for p in paces)


@dataclass(frozen=True)
class Attainment:
    """How a finished SLO request did against its objectives (``None``: it had no such SLO)."""

    ttft_s: Optional[float]
    tpot_s: Optional[float]
    ttft_met: Optional[bool]
    tpot_met: Optional[bool]

    @property
    def met(self) -> bool:
        return self.ttft_met is not False and self.tpot_met is not False


def attainment(slo: SLO, submitted_s: float, first_token_s: Optional[float], finished_s: float,
               tokens: int) -> Attainment:
    """TTFT from submission to the first token; TPOT the mean gap between the later tokens."""
    ttft = None if first_token_s is None else first_token_s - submitted_s
    tpot = (finished_s - first_token_s) / (tokens - 1) if first_token_s is not None and tokens > 1 else 0.0
    return Attainment(ttft, tpot,
                      None if slo.ttft_s is None else ttft is not None and ttft <= slo.ttft_s,
                      None if slo.tpot_s is None else tpot <= slo.tpot_s)


# The bounds (ms) of the SLO classes: a label per client-chosen value would grow without bound.
SLO_CLASS_BOUNDS_MS = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000)


def slo_class(slo: SLO) -> str:
    """A label for the request's SLO class: its TPOT SLO (else its TTFT SLO) rounded up to the next of
    ``SLO_CLASS_BOUNDS_MS``, so that there are at most a few dozen classes whatever clients send."""
    kind, value = ("tpot", slo.tpot_s) if slo.tpot_s is not None else ("ttft", slo.ttft_s)
    ms = value * 1e3
    bound = next((b for b in SLO_CLASS_BOUNDS_MS if ms <= b), None)
    return f"{kind}_le_{bound}ms" if bound is not None else f"{kind}_over_{SLO_CLASS_BOUNDS_MS[-1]}ms"
