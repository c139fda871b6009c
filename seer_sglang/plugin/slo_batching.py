"""SLO requests beside a rollout, inside one SGLang instance: credit batching, VBS admission, TTFT guard.

The decisions are ``core.slo``'s pure objects; this module carries them out in SGLang's scheduler.

- **Credit batching.** Before a decode step (``Scheduler.update_running_batch``) the running batch is
  split: the requests that decode this step stay in it; the others (SLO requests without a whole
  credit, best-effort samples beyond the room the tightest SLO leaves) move to a parked batch with
  SGLang's own ``filter_batch``. They keep their KV, their request-pool rows and their last sampled
  token (SGLang relays it by row), and merge back with ``merge_batch`` at the start of the next
  scheduler iteration, before it reads new requests, so an abort finds them where it looks. With the
  overlap scheduler the step's results are processed from SGLang's own snapshot of its batch.
  Skipping a step never changes what a request samples: its next token is drawn from the same
  context, at the same position, with the same seed.
- **VBS admission and the TTFT guard.** Before each prefill batch is built
  (``Scheduler.get_new_batch_prefill``) waiting SLO requests that can no longer make their TTFT, or
  whose TPOT SLO would not hold beside the running SLO requests, are refused: SGLang aborts them with
  a message that starts with ``wire.SLO_REJECTED``, which the frontend answers with 429. The others
  go first in the waiting queue, least slack first (``queue_order`` calls :func:`deadline_first`).
- **The step-time model.** With ``--emulate`` the profile's (the simulator's) model; otherwise the
  instance times its own decode steps (the period between two back-to-back decode steps: what a
  request that decodes every step sees, the scheduler's own work included) and fits the draft
  budget's ``CostModel`` to them (``OnlineCost``, the last 16 steps of each batch size). Until it
  has a fit nothing is parked and every SLO request is admitted. The fit and the counters are
  reported in ``/server_info`` as ``seer_slo``; the frontend routes by the fit.
- **Prefill pacing.** A best-effort prefill between decode steps waits until every running SLO request
  has banked, against its TPOT SLO, the time the prefill takes (``core.slo.prefill_fits``).

Under speculative decoding without the overlap scheduler (seer's CPU instances) the verify state that SGLang keeps on
the batch between steps is filtered and merged with the rows, as SGLang does when requests finish or
join; a parked row's state is from the last step it ran in, whose width may differ from the kept
rows' (a plain step is one token wide), so the narrower side is padded to the wider before the merge.
Speculation under the overlap scheduler relays drafts and tokens for the whole batch from step to
step; there nothing is parked (admission and deadline order still apply).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
import weakref
from typing import Any, Optional

from ..config import SLO_CONFIG, PluginConfig
from ..core.slo import (CreditBatcher, Pace, StepTime, Waiting, fitted_step_time, plan_step, prefill_fits, screen,
                        step_time)
from ..core.step_model import StepModel, emulated_model
from ..speculative.budget import OnlineCost
from ..wire import SLO_PARAM, SLO_REJECTED, slo_param_error

logger = logging.getLogger("seer_sglang.plugin")
UPDATE = "sglang.srt.managers.scheduler.Scheduler.update_running_batch"
PROCESS = "sglang.srt.managers.scheduler.Scheduler.process_batch_result"
PREFILL = "sglang.srt.managers.scheduler.Scheduler.get_new_batch_prefill"
INGEST = "sglang.srt.managers.scheduler.Scheduler.ingest_requests"
STATE = "sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController._add_step_times"
REPORT_KEY = "seer_slo"
PREFILL_EWMA = 0.2  # weight of the newest extend step in the prefill time per token


class _State:
    def __init__(self, headroom: float, profile: Optional[StepModel] = None):
        self.headroom = headroom
        self.batcher = CreditBatcher()
        self.cost = OnlineCost(min_points=SLO_CONFIG.min_fit_steps, min_widths=1, per_batch=16)
        self.profile = profile  # the emulation's step-time model, when emulating
        self.model_step = step_time(profile) if profile is not None else None
        self.parked = None  # ScheduleBatch of the running requests that sit this step out
        self.step_start: float | None = None  # when the last decode step began (None after a prefill)
        self.step_batch = 0  # sequences in it
        self.prefill_s_per_token: float | None = None
        self.paces: dict[str, tuple[float, int]] = {}  # SLO rid -> (when first seen decoding, its tokens then)
        self.warned_spec = False
        self.stats = {"slo_steps": 0, "parked": 0, "best_effort_decoded": 0, "best_effort_deferred": 0,
                      "admitted": 0, "rejected_ttft": 0, "rejected_tpot": 0, "prefills_held": 0}

    def step_s(self) -> Optional[StepTime]:
        if self.model_step is not None:
            return self.model_step
        fit = self.cost.model()
        return None if fit is None else fitted_step_time(fit.base_s, fit.per_seq_s + fit.per_token_s)

    def prefill_s(self, tokens: int) -> float:
        if self.profile is not None:
            return self.profile.prefill_batch([tokens], [0])
        return (self.prefill_s_per_token or 0.0) * tokens

    def report(self) -> dict[str, Any]:
        fit = self.cost.model()
        measured = {b: 1e3 * t for b, t in self.cost.mean_step_s().items()}
        return {**self.stats, "fit": None if fit is None else {"base_s": fit.base_s,
                                                               "per_seq_s": fit.per_seq_s + fit.per_token_s},
                "step_ms_by_batch": measured,
                # the model this instance decides by when it is not its fit: the router routes by it too
                "model": dataclasses.asdict(self.profile) if self.profile is not None else None,
                "headroom": self.headroom}


_state: _State | None = None


def slo_of(req: Any) -> Optional[dict[str, Any]]:
    """The request's SLO as the frontend wrote it; None without one, or for a value that is not one
    (``request_check`` fails such a request as it arrives)."""
    params = getattr(req.sampling_params, "custom_params", None)
    slo = params.get(SLO_PARAM) if isinstance(params, dict) else None
    return slo if slo is not None and slo_param_error(slo) is None else None


def _tpot(req: Any) -> Optional[float]:
    slo = slo_of(req)
    return slo.get("tpot_s") if slo else None


def split_batch(batch: Any, keep: list[int], park: list[int]) -> Any:
    """Move the requests at ``park`` out of ``batch`` into a new batch, with SGLang's own
    ``filter_batch`` on each side. ``filter_batch`` rebinds every per-row field rather than editing it,
    so a copy whose sampling state (and penalizers) are copies too filters independently."""
    parked = copy.copy(batch)
    info = copy.copy(batch.sampling_info)
    orchestrator = getattr(info, "penalizer_orchestrator", None)
    if orchestrator is not None:  # it and its penalizers point back (weakly) to their batch and orchestrator
        orchestrator = copy.copy(orchestrator)
        orchestrator.batch = parked
        orchestrator.penalizers = {key: copy.copy(p) for key, p in orchestrator.penalizers.items()}
        for p in orchestrator.penalizers.values():
            p._orchestrator_ref = weakref.ref(orchestrator)
        info.penalizer_orchestrator = orchestrator
    parked.sampling_info = info
    if batch.spec_info is not None:  # its filter rebinds fields too: a copy filters independently
        parked.spec_info = copy.copy(batch.spec_info)
    parked.filter_batch(keep_indices=park)
    batch.filter_batch(keep_indices=keep)
    return parked


def same_width(a: Any, b: Any) -> None:
    """Give two batches' verify states one row width before SGLang concatenates them: each step leaves
    its rows' accepted tokens padded to its own width (``draft_token_num``; 1 after a plain step), and
    SGLang reshapes the concatenation by a single width."""
    if a is None or b is None or a.draft_token_num == b.draft_token_num:
        return
    width = max(a.draft_token_num, b.draft_token_num)
    for info in (a, b):
        if info.draft_token_num < width and info.accept_tokens is not None:
            rows = info.accept_tokens.view(-1, info.draft_token_num)
            padded = rows.new_zeros((rows.shape[0], width))
            padded[:, :info.draft_token_num] = rows
            info.accept_tokens = padded.view(-1)
        info.draft_token_num = width


def restore(running: Any) -> None:
    """Merge the parked requests back into ``running`` (the scheduler's running batch)."""
    if _state is None or _state.parked is None:
        return
    parked, _state.parked = _state.parked, None
    if running.is_empty():
        running.__dict__.update(parked.__dict__)  # its holders keep this object: it becomes the parked batch
    else:
        same_width(running.spec_info, parked.spec_info)
        running.merge_batch(parked)


def update_with_credits(original, scheduler, batch, *args, **kwargs):
    """AROUND hook on ``Scheduler.update_running_batch``: this step's decode batch by credit."""
    st = _state
    restore(batch)
    now = time.perf_counter()
    if st.step_start is not None:  # decode steps back to back: their period is what a request's TPOT sees
        st.cost.record_step(st.step_batch, 1.0, now - st.step_start)
    st.step_start, st.step_batch = now, len(batch.reqs)
    running = {req.rid: _tpot(req) for req in batch.reqs}
    st.paces = {rid: st.paces.get(rid) or (now, len(req.output_ids))
                for rid, req in ((r.rid, r) for r in batch.reqs) if running[rid] is not None}
    if all(t is None for t in running.values()):
        st.batcher.credits.clear()
        return original(scheduler, batch, *args, **kwargs)
    st.stats["slo_steps"] += 1
    step_s = st.step_s()
    if step_s is None:
        return original(scheduler, batch, *args, **kwargs)
    if batch.spec_info is not None and getattr(scheduler, "enable_overlap", False):
        if not st.warned_spec:
            st.warned_spec = True
            logger.warning("SLO credit batching is off on this instance: it decodes speculatively under the "
                           "overlap scheduler, whose relay of drafts and tokens follows the whole batch")
        return original(scheduler, batch, *args, **kwargs)
    kv = {req.rid: len(req.origin_input_ids) + len(req.output_ids) for req in batch.reqs}
    try:
        decision = plan_step(st.batcher, running, kv, step_s, st.headroom, _paces(st, batch.reqs), now)
    except Exception:  # a decision that cannot be made costs this step its credit order, never the instance
        logger.exception("SLO credit batching failed for this step; every request decodes")
        return original(scheduler, batch, *args, **kwargs)
    decode = set(decision.decode)
    st.stats["best_effort_decoded"] += sum(1 for rid in decision.decode if running[rid] is None)
    st.stats["best_effort_deferred"] += sum(1 for rid in decision.skipped if running[rid] is None)
    if decision.skipped and decode:
        keep = [i for i, req in enumerate(batch.reqs) if req.rid in decode]
        park = [i for i, req in enumerate(batch.reqs) if req.rid not in decode]
        st.parked = split_batch(batch, keep, park)
        st.stats["parked"] += len(park)
        st.step_batch = len(keep)
    result = original(scheduler, batch, *args, **kwargs)
    if result is None or result.is_empty():
        # Nothing decodes this step (the rows kept were all finishing, or memory is short): the parked
        # requests rejoin the running batch, and the step is skipped, since SGLang did not prepare
        # them for a decode.
        restore(batch)
        return None
    return result


def before_ingest(scheduler, *args, **kwargs) -> None:
    """BEFORE hook on ``Scheduler.ingest_requests``, the first thing of every scheduler iteration: the
    parked requests rejoin the running batch. By then the step that skipped them has run and been
    sampled (and, without overlap, processed), and an abort about to be read finds them there."""
    restore(scheduler.running_batch)


def after_result(result, scheduler, batch, *args, **kwargs):
    """AFTER hook on ``Scheduler.process_batch_result``: time prefill batches."""
    st = _state
    if batch.forward_mode.is_extend() and batch.extend_lens:
        started = getattr(batch, "_seer_started", None)
        tokens = sum(batch.extend_lens)
        if started is not None and tokens > 0:
            per_token = (time.perf_counter() - started) / tokens
            old = st.prefill_s_per_token
            st.prefill_s_per_token = per_token if old is None else (1 - PREFILL_EWMA) * old + PREFILL_EWMA * per_token
    return result


def _reject(scheduler: Any, req: Any, reason: str, kind: str) -> None:
    from sglang.srt.managers.schedule_batch import FINISH_ABORT
    from sglang.srt.managers.scheduler import _make_abort_req

    _state.stats[f"rejected_{kind}"] += 1
    message = f"{SLO_REJECTED}: {reason}"
    logger.info("SLO request %s refused: %s", req.rid, reason)
    scheduler._release_aborted_request(req)  # as SGLang's own abort of a waiting request
    scheduler.beam_coordinator.retire_group(req)
    scheduler.send_abort_output(_make_abort_req(req, finished_reason=FINISH_ABORT(message).to_json()), req)


def _refusals(st: _State, waiting: list[Any], running_batch: Any) -> dict[int, tuple[str, str]]:
    """id(request) -> (why, which SLO) for the waiting SLO requests to refuse (``core.slo.screen``)."""
    now = time.time()
    entries = []
    for req in waiting:
        slo = slo_of(req)
        ttft, deadline = slo.get("ttft_s"), slo.get("deadline")
        arrival = deadline - ttft if ttft is not None and deadline is not None else now
        entries.append(Waiting(str(id(req)), arrival, ttft if deadline is not None else None,
                               st.prefill_s(len(req.origin_input_ids)), _tpot(req), len(req.origin_input_ids)))
    running = [r for r in (running_batch.reqs if running_batch is not None else [])
               if not r.finished() and _tpot(r) is not None]
    verdict = screen(entries, [_tpot(r) for r in running],
                     [len(r.origin_input_ids) + len(r.output_ids) for r in running], now, st.step_s(), st.headroom)
    return {int(key): why for key, why in verdict.refused.items()}


def _paces(st: _State, reqs: list[Any]) -> dict[str, Pace]:
    """rid -> progress since it was first seen decoding, for the SLO requests among ``reqs``."""
    by_rid = {r.rid: r for r in reqs}
    return {rid: Pace(_tpot(by_rid[rid]), since, len(by_rid[rid].output_ids) - tokens)
            for rid, (since, tokens) in st.paces.items() if rid in by_rid}


def _hold_best_effort(st: _State, scheduler: Any, running_batch: Any) -> list[Any]:
    """Take the best-effort requests out of the waiting queue for this prefill round when a running SLO
    request has not banked the time their prefill would take (``prefill_fits``); returns them."""
    if not st.paces or running_batch is None:
        return []
    best_effort = [r for r in scheduler.waiting_queue if not slo_of(r)]
    if not best_effort:
        return []
    now = time.perf_counter()
    paces = _paces(st, [r for r in running_batch.reqs if not r.finished()])
    budget = getattr(scheduler, "max_prefill_tokens", 16384)
    tokens = min(budget, sum(len(r.origin_input_ids) for r in best_effort))
    if prefill_fits(list(paces.values()), now, st.prefill_s(tokens)):
        return []
    st.stats["prefills_held"] += 1
    scheduler.waiting_queue[:] = [r for r in scheduler.waiting_queue if slo_of(r)]
    return best_effort


def screen_waiting(original, scheduler, running_batch, *args, **kwargs):
    """AROUND hook on ``Scheduler.get_new_batch_prefill``: refuse the waiting SLO requests that would
    miss their TTFT or whose TPOT SLO would not hold; time the prefill batch that comes out."""
    st = _state
    # a request admitted once (then retracted, or waiting for room) is not screened again
    waiting_slo = [req for req in scheduler.waiting_queue if slo_of(req) and not getattr(req, "_seer_admitted", False)]
    if waiting_slo:
        try:
            refused = _refusals(st, waiting_slo, running_batch)
        except Exception:  # admitted unscreened this round rather than failing the instance
            logger.exception("SLO admission failed for this round; the waiting requests go on unscreened")
            refused = {}
        if refused:
            scheduler.waiting_queue[:] = [r for r in scheduler.waiting_queue if id(r) not in refused]
            for req in waiting_slo:
                if id(req) in refused:
                    _reject(scheduler, req, *refused[id(req)])
    held = _hold_best_effort(st, scheduler, running_batch)
    try:
        plan = original(scheduler, running_batch, *args, **kwargs)
    finally:
        scheduler.waiting_queue.extend(held)
    batch = getattr(plan, "batch_to_run", None)
    if batch is not None:
        st.step_start = None  # a prefill between two decode steps: that period is not a decode step's
        batch._seer_started = time.perf_counter()
        for req in batch.reqs:  # admitted: it prefills
            if slo_of(req) and not getattr(req, "_seer_admitted", False):
                req._seer_admitted = True
                st.stats["admitted"] += 1
    return plan


def deadline_first(queue: list[Any]) -> list[Any] | None:
    """The waiting queue with its SLO requests first, least slack (earliest TTFT deadline) first and
    those without a TTFT SLO after them; None when no SLO request waits."""
    slo = [(i, req) for i, req in enumerate(queue) if slo_of(req)]
    if not slo:
        return None
    ordered = sorted(slo, key=lambda item: (slo_of(item[1]).get("deadline") or float("inf"), item[0]))
    firsts = {id(req) for _, req in slo}
    return [req for _, req in ordered] + [req for req in queue if id(req) not in firsts]


def report(result, controller, state, *args, **kwargs):
    """AFTER hook on the scheduler's internal state (``/server_info``): the fit and the counters."""
    if _state is not None:
        state[REPORT_KEY] = _state.report()
    return result


def register_hooks() -> None:
    global _state
    config = PluginConfig.from_env()
    profile = emulated_model(config.emulate, config.emulate_length_scale, config.emulate_time_scale)
    _state = _State(config.slo_headroom, profile)
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(UPDATE, update_with_credits, HookType.AROUND)
    HookRegistry.register(PROCESS, after_result, HookType.AFTER)
    HookRegistry.register(INGEST, before_ingest, HookType.BEFORE)
    HookRegistry.register(PREFILL, screen_waiting, HookType.AROUND)
    HookRegistry.register(STATE, report, HookType.AFTER)
