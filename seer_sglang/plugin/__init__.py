"""The seer plugin for SGLang, loaded through the ``sglang.srt.plugins`` entry point.

SGLang calls :func:`register` early in every one of its processes (launcher, tokenizer manager,
scheduler, detokenizer). Everything in this package runs inside an SGLang process: the queue order,
SLO credit batching and admission, seeded sampling, penalties across chunks, step emulation, the KV pool's CPU support, transfer
gate and write-before-answer, and the speculative pieces (the SEER
worker, its verify backends and sampling, the CPU kernel stand-ins).
A plain SGLang run (the benchmark baseline) skips it with ``SGLANG_PLUGINS=none``.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys

logger = logging.getLogger("seer_sglang.plugin")
_registered = False


def _caller_role() -> str:
    """Name the SGLang component that loaded us (scheduler, detokenizer_manager, engine, ...)."""
    for frame in inspect.stack()[2:]:
        module = frame.frame.f_globals.get("__name__", "")
        if module.startswith("sglang.") and not module.startswith("sglang.srt.plugins"):
            return module.rsplit(".", 1)[-1]
    return os.path.basename(sys.argv[0]) or "python"


def _ensure_log_handler() -> None:
    # Spawned SGLang processes load plugins before SGLang configures logging, so bring our own.
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(asctime)s seer] %(message)s", "%Y-%m-%d %H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def register() -> None:
    """Entry point for SGLang's plugin loader: idempotent, logs once per process."""
    global _registered
    if _registered:
        return
    _registered = True
    _ensure_log_handler()
    # A CPU instance forks its scheduler and detokenizer (``cpu_shims.launch_server``). SGLang's loader
    # then finds its plugins loaded in them (its flag came with the fork) and calls nothing: the children
    # run with this process's hooks. Each says so in the log.
    parent = os.getpid()
    os.register_at_fork(after_in_child=lambda: logger.info("seer_sglang plugin hooks forked into pid=%d from pid=%d",
                                                           os.getpid(), parent))
    from ..config import PluginConfig
    from . import (emulation, hicache_cpu, log_redaction, penalties, pool_hash, pool_writes, queue_order,
                   request_check, seeded_sampling, slo_batching, spec_registry, transfer_gate, weight_namespace)

    log_redaction.register_hooks()
    if PluginConfig.from_env().emulation_only:  # plain SGLang on emulated steps (a benchmark baseline)
        emulation.register_hooks()
        logger.info("seer_sglang plugin loaded for step emulation only (pid=%d, role=%s)", os.getpid(), _caller_role())
        return
    request_check.register_hooks()
    seeded_sampling.register_hooks()
    penalties.register_hooks()
    queue_order.register_hooks()
    spec_registry.register_spec()
    hicache_cpu.register_hooks()
    pool_hash.register_hooks()
    transfer_gate.register_hooks()
    pool_writes.register_hooks()
    weight_namespace.register_hooks()
    emulation.register_hooks()
    slo_batching.register_hooks()
    logger.info("seer_sglang plugin loaded (pid=%d, role=%s)", os.getpid(), _caller_role())
