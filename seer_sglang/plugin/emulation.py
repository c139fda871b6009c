"""Emulated GPU steps: a real SGLang instance whose forward steps take the times of a step-time model.

A CPU cannot show what seer gains on GPUs: its decode step is compute-shaped, and a lone tail sample
runs several times faster than a full batch. With ``--emulate PROFILE`` every forward step of a real
instance (scheduler, radix cache, retraction, the seer plugin, a real small model) is padded to the
time the profile (``core.step_model``, the simulator's own model) gives for the batch it ran: decode
and verify from batch size, tokens and KV tokens read, prefill from new and cached tokens.

Each instance keeps an emulated clock. A step ends at the clock's previous step end plus the
model's time for this batch, and the scheduler waits for it. SGLang's own work between steps
(processing results, building the next batch) therefore counts in, as on a GPU, where it runs
under the previous step's kernels. After an idle spell (SGLang's ``on_idle``) the clock restarts.
A step whose real work ran past its end (a short emulated prefill of a chunk continuation, whose
real CPU forward is longer) leaves the clock behind, and the next steps catch up by waiting less.
The run keeps the model's total time as long as the host keeps up. A step that ends more than
one smallest decode step (base + weight read) behind the clock is an overrun: the host did not
keep up. Overruns are counted, with the time lost to idle spells that came while the clock was
behind. Both are reported in SGLang's ``/server_info`` as ``seer_emulation``. A run with more than
5% overruns measured the host, not the profile.

Everything this produces is emulation, not a GPU measurement, and is labelled so wherever it is shown.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import IO, Optional

from ..config import PluginConfig
from ..core.step_model import StepModel, emulated_model

logger = logging.getLogger("seer_sglang.plugin")
FORWARD = "sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation"
IDLE = "sglang.srt.managers.scheduler.Scheduler.on_idle"
ARRIVE = "sglang.srt.managers.scheduler.Scheduler.handle_generate_request"
STATE = "sglang.srt.managers.scheduler_components.internal_state.SchedulerInternalStateController._add_step_times"
REPORT_KEY = "seer_emulation"

_model: StepModel | None = None
_clock: float | None = None  # the emulated end of the previous step; None after an idle spell
_tolerance_s = 0.0  # how far the clock may fall behind before a step counts as an overrun
_last_end: float | None = None  # when the previous step returned; None after an idle spell
_step_log_prefix: Optional[str] = None  # --emulate-step-log: one JSON line per step, to <prefix>.<pid>
_step_log: Optional[IO[str]] = None
STATS = {"profile": "", "steps": 0, "overruns": 0, "model_s": 0.0, "lost_s": 0.0, "max_overrun_s": 0.0, "kinds": {}}


def step_kind(batch) -> str:
    mode = batch.forward_mode
    return "verify" if mode.is_target_verify() else "prefill" if mode.is_extend() else "decode"


def note_host(kind: str, model_s: float, host_s: float) -> None:
    """Per kind of step: the modelled time against the host's (the step's forward and the scheduler's
    work since the previous step returned), so a run that falls behind says which steps the host
    could not hold."""
    entry = STATS["kinds"].setdefault(kind, {"steps": 0, "model_s": 0.0, "host_s": 0.0})
    entry["steps"] += 1
    entry["model_s"] += model_s
    entry["host_s"] += host_s


def batch_kv_tokens(batch) -> int:
    """The KV tokens a decode or verify step over a ScheduleBatch reads: its requests' lengths."""
    return int(batch.seq_lens_cpu.sum()) if batch.seq_lens_cpu is not None else int(batch.seq_lens_sum or 0)


def batch_longest(batch) -> int:
    """The longest sequence of a decode or verify step over a ScheduleBatch, in KV tokens."""
    lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens
    return int(lens.max()) if lens is not None and len(lens) else 0


def batch_step_s(model: StepModel, batch) -> float:
    """The modelled time of one forward step over a ScheduleBatch."""
    mode = batch.forward_mode
    bs = len(batch.reqs)
    if mode.is_extend() and not mode.is_target_verify():
        return model.prefill_batch(list(batch.extend_lens or []), list(batch.prefix_lens or []))
    tokens = verify_tokens(batch) if mode.is_target_verify() else bs
    return model.decode_step(bs, batch_kv_tokens(batch), tokens, batch_longest(batch))


def verify_tokens(batch) -> int:
    """The tokens a verify step computes: every request's draft tree, root included."""
    return int(batch.input_ids.numel()) if batch.input_ids is not None else len(batch.reqs)


def step_record(batch, model_s: float, late_s: float, end: float) -> dict:
    """One step of the step log: when it ended (``time.perf_counter``), its kind, the modelled time,
    how late the host was against the clock (negative: the step waited), the requests it ran, and the
    KV tokens it read (prefill: each request's new and cached tokens; verify: the tokens it computed,
    every request's draft tree with its root). A decode or verify step also has each request's length
    before it: the next step's less this one's is what the step committed for that request."""
    kind = step_kind(batch)
    record = {"t": end, "kind": kind, "model_s": model_s, "late_s": late_s, "rids": [r.rid for r in batch.reqs],
              "kv": int(batch.seq_lens_cpu.sum()) if batch.seq_lens_cpu is not None else None}
    if kind == "prefill":
        record.update(extend=list(batch.extend_lens or []), prefix=list(batch.prefix_lens or []))
    elif batch.seq_lens_cpu is not None:
        record["lens"] = [int(n) for n in batch.seq_lens_cpu.tolist()]
    if kind == "verify":
        record["tokens"] = verify_tokens(batch)
    return record


def write_step(record: dict) -> None:
    """Appends to this scheduler's own file, opened with its first step (SGLang's other processes load
    the plugin too, and run no steps)."""
    global _step_log
    if _step_log is None:
        _step_log = open(f"{_step_log_prefix}.{os.getpid()}", "a", buffering=1)  # line-buffered
    _step_log.write(json.dumps(record) + "\n")


def padded_forward(original, worker, batch=None, *args, **kwargs):
    """AROUND hook: run the real step, then wait until the instance's emulated clock reaches the end
    of this step."""
    global _clock, _last_end
    start = time.perf_counter()
    result = original(worker, batch, *args, **kwargs)
    if batch is None or _model is None or batch.forward_mode.is_idle():
        return result
    step = batch_step_s(_model, batch)
    due = (start if _clock is None else _clock) + step
    now = time.perf_counter()
    STATS["steps"] += 1
    STATS["model_s"] += step
    note_host(step_kind(batch), step, now - (start if _last_end is None else _last_end))
    late = now - due
    if late > _tolerance_s:
        STATS["overruns"] += 1
        STATS["max_overrun_s"] = max(STATS["max_overrun_s"], late)
    if late < 0:
        time.sleep(-late)
    _clock = due
    _last_end = time.perf_counter()
    if _step_log_prefix:
        write_step(step_record(batch, step, late, _last_end))
    return result


def arrived(scheduler, recv_req, *args, **kwargs) -> None:
    """BEFORE hook on the scheduler taking a request in (step log only): when it reached the queue."""
    write_step({"t": time.perf_counter(), "kind": "arrive", "rids": [recv_req.rid]})


def went_idle(*args, **kwargs) -> None:
    """BEFORE hook on the scheduler's idle housekeeping: the clock restarts with the next step, and
    whatever it was behind is lost."""
    global _clock, _last_end
    if _clock is not None:
        STATS["lost_s"] += max(0.0, time.perf_counter() - _clock)
    _clock = _last_end = None


def report(result, controller, state, *args, **kwargs):
    """AFTER hook on the scheduler's internal state (``/server_info``): the emulation's counters."""
    if _model is not None:
        steps = STATS["steps"]
        kinds = {kind: dict(entry) for kind, entry in STATS["kinds"].items()}
        state[REPORT_KEY] = {**STATS, "kinds": kinds, "overrun_share": STATS["overruns"] / steps if steps else 0.0}
    return result


def reset() -> None:
    STATS.update(steps=0, overruns=0, model_s=0.0, lost_s=0.0, max_overrun_s=0.0, kinds={})


def register_hooks() -> None:
    """Hooks only when this instance was started with ``--emulate``."""
    global _model, _tolerance_s, _step_log_prefix
    config = PluginConfig.from_env()
    _model = emulated_model(config.emulate, config.emulate_length_scale, config.emulate_time_scale)
    if _model is None:
        return
    _tolerance_s = _model.decode_step(1, 0)
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    _step_log_prefix = config.emulate_step_log
    STATS["profile"] = _model.name
    HookRegistry.register(FORWARD, padded_forward, HookType.AROUND)
    HookRegistry.register(IDLE, went_idle, HookType.BEFORE)
    HookRegistry.register(STATE, report, HookType.AFTER)
    if _step_log_prefix:
        HookRegistry.register(ARRIVE, arrived, HookType.BEFORE)
    logger.info("EMULATED STEPS: forward steps padded to profile %s (decode at batch 1 / 64: %.1f / %.1f ms)",
                _model.name, 1e3 * _model.decode_step(1, 0), 1e3 * _model.decode_step(64, 0))
