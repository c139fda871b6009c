"""The pool's page-hash extension is built and loaded when the instance starts, not on first use.

SGLang names every pool page by a hash computed in a C++ extension that torch compiles on first
use (``hicache_hash_cpp``), under a machine-wide lock, and again whenever its source path changes
(a new virtual environment). Left lazy, the first storage lookup pays for it: on CPU the compile
takes 5-10 s, longer than HiCache's prefetch deadline, so the first samples that move to an
instance wait out the deadline and recompute a context the pool holds, and every other instance
that needs the hash meanwhile waits on the lock. This hook loads it while the instance starts,
before it reports healthy (``scripts/setup.sh`` builds it at install, so a start only loads it).
"""

from __future__ import annotations

import logging
import time

logger = logging.getLogger("seer_sglang.plugin")


def load_page_hash() -> float:
    """Build (if needed) and load the page-hash extension; returns the seconds it took."""
    from sglang.srt.mem_cache.cpp_utils.native_hash import _load_native_hash_module

    start = time.monotonic()
    _load_native_hash_module()
    return time.monotonic() - start


def _after_attach_storage(result, controller, *args, **kwargs):
    """AFTER hook on ``HiCacheController.attach_storage_backend``."""
    if getattr(controller, "enable_storage", False):
        logger.info("KV pool: page-hash extension ready in %.2fs", load_page_hash())
    return result


def register_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.managers.cache_controller.HiCacheController.attach_storage_backend",
                          _after_attach_storage, HookType.AFTER)
