"""In-instance mechanism for :class:`~seer_sglang.core.transfer.TransferScheduler`.

HiCache moves pool pages in batches on its own threads (prefetch reads, write-through backups).
On a busy instance those batches compete with the decode step for cores and the GIL. The gate
counts decode steps (a hook around the scheduler's forward) and holds each batch until the policy
lets it run. Off unless ``PluginConfig.transfer_scheduler`` (``launch_server`` turns it on with a pool).
"""

from __future__ import annotations

import threading

from ..config import PluginConfig
from ..core.transfer import TransferScheduler


class TransferGate:
    def __init__(self, policy: TransferScheduler, max_wait_s: float = 0.5):
        self.policy = policy
        self.max_wait_s = max_wait_s  # safety net for a stalled scheduler loop
        self._cond = threading.Condition()
        self.decode_running = False
        self.steps = 0
        self.held = {"read": 0, "write": 0}  # pieces that had to wait, for logs and tests

    def decode_started(self) -> None:
        with self._cond:
            self.decode_running = True

    def decode_finished(self) -> None:
        with self._cond:
            self.decode_running = False
            self.steps += 1
            self._cond.notify_all()

    def wait_turn(self, kind: str) -> None:
        with self._cond:
            start = self.steps
            decision = self.policy.decide(kind, 0, self.decode_running)
            if not decision.run:
                self.held[kind] += 1
            while not decision.run:
                if not self._cond.wait(timeout=self.max_wait_s):
                    return
                decision = self.policy.decide(kind, self.steps - start, self.decode_running)


_gate: TransferGate | None = None


def _around_forward(original, self, batch, *args, **kwargs):
    decoding = batch is not None and getattr(batch, "forward_mode", None) is not None and batch.forward_mode.is_decode()
    if not decoding:
        return original(self, batch, *args, **kwargs)
    _gate.decode_started()
    try:
        return original(self, batch, *args, **kwargs)
    finally:
        _gate.decode_finished()


def _around_read(original, self, *args, **kwargs):
    _gate.wait_turn("read")
    return original(self, *args, **kwargs)


def _around_write(original, self, *args, **kwargs):
    _gate.wait_turn("write")
    return original(self, *args, **kwargs)


def register_hooks() -> None:
    global _gate
    config = PluginConfig.from_env()
    if not config.transfer_scheduler:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    _gate = TransferGate(TransferScheduler(starvation_steps=config.transfer_starvation_steps))
    HookRegistry.register("sglang.srt.managers.scheduler.Scheduler.run_batch", _around_forward, HookType.AROUND)
    cc = "sglang.srt.managers.cache_controller.HiCacheController"
    HookRegistry.register(f"{cc}._page_transfer_kv_batch", _around_read, HookType.AROUND)
    HookRegistry.register(f"{cc}._generic_page_set", _around_write, HookType.AROUND)
    HookRegistry.register(f"{cc}._page_set_zero_copy", _around_write, HookType.AROUND)
