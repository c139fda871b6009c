"""Every request's reserved custom params checked as it enters the scheduler.

The frontend writes the keys of ``wire.RESERVED_PARAMS`` and refuses a client's request that carries
one, but an instance's port can be reached without the frontend (a trainer attached to the instances,
a router in front of them). A value the plugin's hooks would read (an SLO that is not the frontend's
object, a prior-output count that is not a count) fails its own request here with a 400, as SGLang
fails an invalid request, and is dropped from the request's params: no hook of a scheduler step ever
reads it, so no request can raise inside the scheduler and take the instance down. On a SEER
instance a request also ends a verify width before the context does (``spare_the_context_end``).
"""

from __future__ import annotations

import logging
from typing import Any

from ..wire import PRIOR_OUTPUT_PARAM, RESERVED_PARAMS, SLO_PARAM, SPEC_ALGORITHM, prior_output, slo_param_error

logger = logging.getLogger("seer_sglang.plugin")
CREATE = "sglang.srt.managers.scheduler.Scheduler._create_generation_req"


def reserved_error(params: Any) -> str | None:
    """Why a request's custom params cannot be served, or None."""
    if params is None:
        return None
    if not isinstance(params, dict):
        return "custom_params must be an object"
    if SLO_PARAM in params and params[SLO_PARAM] is not None:
        error = slo_param_error(params[SLO_PARAM])
        if error is not None:
            return error
    if PRIOR_OUTPUT_PARAM in params and prior_output(params) != params[PRIOR_OUTPUT_PARAM]:
        return f"{PRIOR_OUTPUT_PARAM} must be a non-negative integer"
    return None


def check_request(req: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER hook on ``Scheduler._create_generation_req``: a request with a bad reserved value ends at
    once with SGLang's own abort (400), its reserved keys dropped."""
    sampling = getattr(req, "sampling_params", None)
    params = getattr(sampling, "custom_params", None)
    error = reserved_error(params)
    if error is None:
        return req
    sampling.custom_params = ({k: v for k, v in params.items() if k not in RESERVED_PARAMS}
                              if isinstance(params, dict) else None)
    req.set_finish_with_abort(f"invalid custom_params: {error}")
    return req


MAX_NEW = "sglang.srt.managers.scheduler.Scheduler.init_req_max_new_tokens"


def spare_the_context_end(result: Any, scheduler: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER hook on ``Scheduler.init_req_max_new_tokens`` on a SEER instance: a request stops a verify
    width short of SGLang's own bound (``max_req_len - input - 1``). A speculative step at the very end
    of the context leaves one KV slot unfreed when its request ends there, and SGLang's idle check
    (``SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE``, on by default) then stops the scheduler: one
    request without a token limit, on a model whose context it fills, would take the instance down."""
    if getattr(getattr(scheduler, "spec_algorithm", None), "name", None) != SPEC_ALGORITHM:
        return result
    sampling = req.sampling_params
    width = int(getattr(scheduler.server_args, "speculative_num_draft_tokens", None) or 0)
    bound = max(0, scheduler.max_req_len - len(req.origin_input_ids) - 1 - width)
    if sampling.max_new_tokens is not None and sampling.max_new_tokens > bound:
        sampling.max_new_tokens = bound
        sampling.min_new_tokens = min(sampling.min_new_tokens, bound)
    return result


def register_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(CREATE, lambda result, scheduler, *a, **k: check_request(result), HookType.AFTER)
    HookRegistry.register(MAX_NEW, spare_the_context_end, HookType.AFTER)
