"""Where each chunk's context came from (device cache, host DRAM tier, pool) and what was recomputed.

Re-prefill is what continuation chunks (every chunk after a sample's first) recompute: the cost
divided rollout pays for moving work between instances, and what the pool exists to remove.
"""

from __future__ import annotations

from typing import Iterable

from ..rollout.request import ChunkRecord, Sample
from .cost import MigrationCost


KV_SOURCES = ("device", "host", "pool", "recomputed")


def chunk_sources(chunk: ChunkRecord) -> dict[str, int]:
    return dict(zip(KV_SOURCES, (chunk.device_tokens, chunk.host_tokens, chunk.pool_tokens,
                                 chunk.recomputed_tokens)))


def rollout_sources(samples: Iterable[Sample], cost: MigrationCost | None = None) -> dict[str, float]:
    """Totals over a rollout: tokens by source, re-prefill tokens, and the time the pool saved."""
    totals = {**dict.fromkeys(KV_SOURCES, 0), "reprefill_tokens": 0, "continuations": 0, "moves": 0}
    for sample in samples:
        previous = None
        for i, chunk in enumerate(sample.chunks):
            for key, value in chunk_sources(chunk).items():
                totals[key] += value
            if i > 0:
                totals["continuations"] += 1
                totals["reprefill_tokens"] += chunk.recomputed_tokens
                totals["moves"] += int(chunk.instance != previous)
            previous = chunk.instance
    totals["pool_saved_s"] = (cost or MigrationCost()).saved_s(totals["pool"])
    return totals
