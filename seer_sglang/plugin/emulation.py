"""Emulated GPU steps: a real SGLang instance whose forward steps take the times of a step-time model.

A CPU cannot show what seer gains on GPUs: its decode step is compute-shaped, and a lone tail sample
runs several times faster than a full batch. With ``--emulate PROFILE`` every forward step of a real
instance (scheduler, radix cache, retraction, the seer plugin, a real small model) is padded to the
time the profile (``core.step_model``, the simulator's own model) gives for the batch it ran: decode
and verify from batch size, tokens and KV tokens read, prefill from new and cached tokens. The real
model must be much faster than the emulated one; a step whose real time exceeded the model is an
overrun, counted, and reported in SGLang's ``/server_info`` as ``seer_emulation`` (a run with more than
5% overruns measured the host, not the profile).

Everything this produces is emulation, not a GPU measurement, and is labelled so wherever it is shown.
"""

from __future__ import annotations

import logging
import time

from ..config import PluginConfig
from ..core.step_model import StepModel, emulated_model

logger = logging.getLogger("seer_sglang.plugin")
FORWARD = "sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation"
STATE = "sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController._add_step_times"
REPORT_KEY = "seer_emulation"

_model: StepModel | None = None
STATS = {"profile": "", "steps": 0, "overruns": 0, "model_s": 0.0, "real_s": 0.0, "max_overrun_s": 0.0}


def batch_step_s(model: StepModel, batch) -> float:
    """The modelled time of one forward step over a ScheduleBatch."""
    mode = batch.forward_mode
    bs = len(batch.reqs)
    if mode.is_extend() and not mode.is_target_verify():
        return model.prefill_batch(list(batch.extend_lens or []), list(batch.prefix_lens or []))
    kv = int(batch.seq_lens_cpu.sum()) if batch.seq_lens_cpu is not None else int(batch.seq_lens_sum or 0)
    tokens = int(batch.input_ids.numel()) if mode.is_target_verify() and batch.input_ids is not None else bs
    return model.decode_step(bs, kv, tokens)


def padded_forward(original, worker, batch=None, *args, **kwargs):
    """AROUND hook: run the real step, then wait until the modelled time has passed."""
    start = time.perf_counter()
    result = original(worker, batch, *args, **kwargs)
    if batch is None or _model is None or batch.forward_mode.is_idle():
        return result
    target = batch_step_s(_model, batch)
    real = time.perf_counter() - start
    STATS["steps"] += 1
    STATS["model_s"] += target
    STATS["real_s"] += real
    if real > target:
        STATS["overruns"] += 1
        STATS["max_overrun_s"] = max(STATS["max_overrun_s"], real - target)
    else:
        time.sleep(target - real)
    return result


def report(result, controller, state, *args, **kwargs):
    """AFTER hook on the scheduler's internal state (``/server_info``): the emulation's counters."""
    if _model is not None:
        steps = STATS["steps"]
        state[REPORT_KEY] = {**STATS, "overrun_share": STATS["overruns"] / steps if steps else 0.0}
    return result


def reset() -> None:
    STATS.update(steps=0, overruns=0, model_s=0.0, real_s=0.0, max_overrun_s=0.0)


def register_hooks() -> None:
    """Hooks only when this instance was started with ``--emulate``."""
    global _model
    config = PluginConfig.from_env()
    _model = emulated_model(config.emulate, config.emulate_length_scale, config.emulate_time_scale)
    if _model is None:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    STATS["profile"] = _model.name
    HookRegistry.register(FORWARD, padded_forward, HookType.AROUND)
    HookRegistry.register(STATE, report, HookType.AFTER)
    logger.info("EMULATED STEPS: forward steps padded to profile %s (decode at batch 1 / 64: %.1f / %.1f ms)",
                _model.name, 1e3 * _model.decode_step(1, 0), 1e3 * _model.decode_step(64, 0))
