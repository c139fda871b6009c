"""A finished chunk's pages are in the global KV pool before its answer leaves the instance.

HiCache writes a request's KV through to the host tier and then, on background threads, to the
pool. Its answer goes out as soon as the request finishes, so the pages of the last chunk reach the
pool a little later. If the instance dies in between, a continuation elsewhere recomputes them; and
the router, pricing a move, cannot know whether they are there yet.

This hook runs on the scheduler thread just before finished requests are streamed out: it submits
the pending host writes, waits for them (``writing_check(write_back=True)``, SGLang's own blocking
flush), and then waits until the pool has acknowledged every queued page write, up to
``pool_write_wait_s``. Every rank of a TP group takes the same decision each round (a MAX
all-reduce), so the collectives inside stay in step. A pool that is slow or down costs at most the
bound per finished batch; its pages are then recomputed where they are needed, as without a pool.
"""

from __future__ import annotations

import logging
import time

import torch

from ..config import PluginConfig

logger = logging.getLogger("seer_sglang.plugin")

_wait_s = 0.0


def flush_to_pool(tree, wait_s: float) -> bool:
    """Write every page the tree has queued through to the pool; False if ``wait_s`` ran out."""
    if getattr(tree, "cache_controller", None) is None or not getattr(tree, "enable_storage", False):
        return True
    if getattr(tree, "buffer_pipeline", None) is not None or getattr(tree, "linker", None) is not None:
        return True  # buffer-only host memory and external linkers have their own write paths
    start = time.monotonic()
    tree.flush_pending_backups()
    tree.writing_check(write_back=True)  # device -> host done; each node's pool write is queued
    while True:
        state = torch.tensor([len(tree.ongoing_backup), int(time.monotonic() - start > wait_s)], dtype=torch.int)
        tree._all_reduce(state, torch.distributed.ReduceOp.MAX)
        pending, timed_out = int(state[0]), bool(state[1])
        if pending == 0 or timed_out:
            break
        time.sleep(0.0005)
        tree.drain_storage_control_queues()  # acknowledges finished pool writes (ongoing_backup)
    if pending:
        logger.warning("KV pool: %d page writes still pending after %.1fs; answering without them", pending, wait_s)
    return pending == 0


def _before_stream_output(self, reqs, *args, **kwargs):
    """BEFORE hook on ``SchedulerOutputStreamer.stream_output``."""
    if any(req.finished() for req in reqs):
        flush_to_pool(self.tree_cache, _wait_s)
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
