"""Length-context queue order inside one SGLang instance.

The router sends each chunk with a priority (its place in the router's length-context order) and a
rid ``<group>-<index>-c<chunk>``. After SGLang's own policy has sorted the waiting queue, this hook
re-sorts it as ``core.queue_order`` orders a queue: groups by the best priority among their waiting
members, then the members of a group together. Requests that carry no priority keep SGLang's order
among themselves. Requests with an SLO go before all of them, earliest TTFT deadline first
(``slo_batching.deadline_first``).

Siblings share their prompt in the radix cache, but only once it is there: SGLang's prefill batch
computes each request's uncached tokens on its own, so siblings admitted in the same batch would
compute their common prompt once each. A second hook, on ``PrefillAdder.add_one_req``, leaves a
sibling for the next batch when a member of its group already in this batch computes the same
uncached tokens, or a prefill still in flight does (SGLang's overlap schedule forms a batch before
the last one's prompts are cached); once the prompt is cached the sibling prefills only its own part.

SGLang's priority scheduling is not needed (and its preemption is not wanted): the scheduler keeps
``req.priority`` as sent even when priority scheduling is off.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from ..config import MIN_SHARED_PREFILL
from ..core.queue_order import group_first_order
from ..wire import parse_chunk_rid
from .slo_batching import deadline_first

TARGET = "sglang.srt.managers.schedule_policy.SchedulePolicy.calc_priority"
ADDER = "sglang.srt.managers.schedule_policy.PrefillAdder.add_one_req"
logger = logging.getLogger("seer_sglang.plugin")
_announced = False


def group_of(rid: str) -> str | None:
    parsed = parse_chunk_rid(rid)
    return parsed.group if parsed else None


def length_context_order(queue: Sequence[Any]) -> list[Any] | None:
    """The new order of ``queue`` (items with ``rid`` and ``priority``), or None to keep SGLang's."""
    order = group_first_order([(group_of(r.rid), r.rid, r.priority) for r in queue])
    return None if order is None else [queue[pos] for pos in order]


def calc_priority_with_length_context(original, self, waiting_queue, *args, **kwargs):
    """AROUND hook on ``SchedulePolicy.calc_priority``."""
    global _announced
    result = original(self, waiting_queue, *args, **kwargs)
    ordered = length_context_order(waiting_queue)
    if ordered is not None:
        waiting_queue[:] = ordered
        if not _announced:
            _announced = True
            logger.info("length-context queue order active (%d waiting)", len(ordered))
    slo_first = deadline_first(waiting_queue)  # requests with an SLO go before the rollout's
    if slo_first is not None:
        waiting_queue[:] = slo_first
    return result


def shares_uncached_prefill(req: Any, others: Sequence[Any], min_shared: int = MIN_SHARED_PREFILL) -> bool:
    """Whether a member of ``req``'s group in ``others`` would compute the same next ``min_shared``
    uncached tokens of ``req`` (items with ``rid``, ``origin_input_ids`` and ``prefix_len``)."""
    group = group_of(req.rid)
    if group is None:
        return False
    end = req.prefix_len + min_shared
    ids = req.origin_input_ids
    if len(ids) < end:
        return False
    return any(group_of(o.rid) == group and o.prefix_len < end and len(o.origin_input_ids) >= end
               and o.origin_input_ids[req.prefix_len:end] == ids[req.prefix_len:end]
               and o.origin_input_ids[:req.prefix_len] == ids[:req.prefix_len] for o in others)


def in_flight_by_group(adder: Any) -> dict[str, list[Any]]:
    """The running batch's requests whose prefill has no result yet, by group, once per prefill batch
    (an adder lives for one). Under SGLang's overlap schedule the prefill batch before this one is
    merged into the running batch before its result is processed, and its prompts enter the radix
    cache only with that result, after this batch is formed: a request with no output token yet is
    such a prefill, still computing the prompt this batch would compute again."""
    found = getattr(adder, "_seer_in_flight", None)
    if found is None:
        found = {}
        batch = getattr(adder, "running_batch", None)
        for r in getattr(batch, "reqs", None) or ():
            group = group_of(r.rid)
            if group is not None and not r.output_ids:
                found.setdefault(group, []).append(r)
        adder._seer_in_flight = found
    return found


def add_one_req_after_siblings(original, self, req, *args, **kwargs):
    """AROUND hook on ``PrefillAdder.add_one_req``: a sibling whose uncached prompt another member of
    this batch computes, or a prefill still in flight computes, waits for the next batch (it stays in
    the waiting queue). It waits one step at most: the in-flight prefill's result caches the prompt."""
    from sglang.srt.managers.schedule_policy import AddReqResult

    group = group_of(req.rid)
    if group is not None:
        others = [*self.can_run_list, *in_flight_by_group(self).get(group, ())]
        if others and shares_uncached_prefill(req, others):
            return AddReqResult.CONTINUE
    return original(self, req, *args, **kwargs)


def register_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, calc_priority_with_length_context, HookType.AROUND)
    HookRegistry.register(ADDER, add_one_req_after_siblings, HookType.AROUND)
