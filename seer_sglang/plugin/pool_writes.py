"""A finished chunk's pages are in the global KV pool before its answer leaves the instance.

HiCache writes a request's KV through to the host tier and then, on background threads, to the
pool. Its answer goes out as soon as the request finishes, so the pages of the last chunk reach the
pool a little later. If the instance dies in between, a continuation elsewhere recomputes them; and
the router, pricing a move, cannot know whether they are there yet.

This hook runs on the scheduler thread just before finished requests are streamed out: it submits
the pending host writes, waits for them (``writing_check(write_back=True)``, SGLang's own blocking
flush), and then waits until the pool has acknowledged every queued page write, up to
``pool_write_wait_s``. Every rank of a TP group takes the same decision each round (a MAX
all-reduce), so the collectives inside stay in step.

A pool that is down (a Mooncake master gone, a full or read-only directory) fails or stalls its
writes. Waiting the whole bound for every finished batch would then slow every answer, so a wait
that runs out opens a breaker: answers stop waiting for ``cooldown`` seconds (doubling while the
pool stays down, up to ``MAX_COOLDOWN_S``), and the first round that finds no write pending closes
it again. Pages a down pool misses are recomputed where they are needed, as without a pool.
"""

from __future__ import annotations

import logging
import time

import torch

from ..config import PluginConfig

logger = logging.getLogger("seer_sglang.plugin")

MIN_COOLDOWN_S = 10.0
MAX_COOLDOWN_S = 160.0


class WriteBreaker:
    """Whether answers wait for the pool: not for a while after a wait ran out."""

    def __init__(self, min_cooldown_s: float = MIN_COOLDOWN_S, max_cooldown_s: float = MAX_COOLDOWN_S):
        self.min_cooldown_s, self.max_cooldown_s = min_cooldown_s, max_cooldown_s
        self.cooldown_s = 0.0  # 0 while closed
        self.open_until = 0.0
        self.trips = 0

    def is_open(self, now: float) -> bool:
        return now < self.open_until

    def trip(self, now: float) -> float:
        """A wait ran out: stop waiting for a cooldown twice as long as the last one's."""
        self.cooldown_s = min(self.max_cooldown_s, max(self.min_cooldown_s, 2 * self.cooldown_s))
        self.open_until = now + self.cooldown_s
        self.trips += 1
        return self.cooldown_s

    def close(self) -> bool:
        """Every write was acknowledged; True if the breaker was tripped before."""
        was = self.cooldown_s > 0
        self.cooldown_s, self.open_until = 0.0, 0.0
        return was


_wait_s = 0.0
_breaker = WriteBreaker()


def flush_to_pool(tree, wait_s: float, breaker: WriteBreaker | None = None) -> bool:
    """Write every page the tree has queued through to the pool; False if ``wait_s`` ran out, or the
    breaker had the answer go without waiting."""
    if getattr(tree, "cache_controller", None) is None or not getattr(tree, "enable_storage", False):
        return True
    if getattr(tree, "buffer_pipeline", None) is not None or getattr(tree, "linker", None) is not None:
        return True  # buffer-only host memory and external linkers have their own write paths
    start = time.monotonic()
    tree.flush_pending_backups()
    tree.writing_check(write_back=True)  # device -> host done; each node's pool write is queued
    skip = breaker is not None and breaker.is_open(start)
    while True:
        state = torch.tensor([len(tree.ongoing_backup), int(time.monotonic() - start > wait_s), int(skip)],
                             dtype=torch.int)
        tree._all_reduce(state, torch.distributed.ReduceOp.MAX)  # one decision for every rank
        pending, timed_out, skip = int(state[0]), bool(state[1]), bool(state[2])
        if pending == 0 or timed_out or skip:
            break
        time.sleep(0.0005)
        tree.drain_storage_control_queues()  # acknowledges finished pool writes (ongoing_backup)
    if breaker is not None and pending == 0 and breaker.close():
        logger.info("KV pool: page writes are acknowledged again; answers wait for them again")
    if pending and timed_out:
        if breaker is None:
            logger.warning("KV pool: %d page writes still pending after %.1fs; answering without them",
                           pending, wait_s)
        else:
            cooldown = breaker.trip(time.monotonic())
            logger.warning("KV pool: %d page writes still pending after %.1fs; answering without them, and "
                           "not waiting for the pool for %.0fs", pending, wait_s, cooldown)
    return pending == 0


def _before_stream_output(self, reqs, *args, **kwargs):
    """BEFORE hook on ``SchedulerOutputStreamer.stream_output``."""
    if any(req.finished() for req in reqs):
        flush_to_pool(self.tree_cache, _wait_s, _breaker)
    return None


def register_hooks() -> None:
    global _wait_s
    config = PluginConfig.from_env()
    if config.pool_write_wait_s <= 0:
        return
    _wait_s = config.pool_write_wait_s
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer"
                          ".stream_output", _before_stream_output, HookType.BEFORE)
    logger.info("KV pool: a finished chunk is answered once its pages are in the pool (waiting at most %.1fs)",
                _wait_s)
