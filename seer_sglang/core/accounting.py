"""What a sample or a rollout cost and saved: where each chunk's context came from, and what
speculative decoding bought.

KV sources: device cache, host DRAM tier, global pool, or recomputed. Re-prefill is what
continuation chunks (every chunk after a sample's first) recompute: the cost divided rollout pays for
moving work between instances, and what the pool exists to remove. Only chunks an instance reported
on count: a chunk lost with its instance ran nowhere that can be measured, and the sample's next
chunk is a move from the last instance that did report.

Speculation: verify steps and accepted draft tokens. Mean acceptance length = tokens emitted per
verify step = (accepted drafts + steps) / steps, the figure Seer reports (1.0 = no draft accepted).
"""

from __future__ import annotations

from typing import Iterable

from .migration import MigrationCost
from .request import ChunkRecord, Sample


KV_SOURCES = ("device", "host", "pool", "recomputed")


def chunk_sources(chunk: ChunkRecord) -> dict[str, int]:
    """All zero for a chunk no instance reported on: nothing set its sources."""
    return dict(zip(KV_SOURCES, (chunk.device_tokens, chunk.host_tokens, chunk.pool_tokens,
                                 chunk.recomputed_tokens)))


def rollout_sources(samples: Iterable[Sample], cost: MigrationCost | None = None) -> dict[str, float]:
    """Totals over a rollout: tokens by source, re-prefill tokens, and the time the pool saved."""
    totals = {**dict.fromkeys(KV_SOURCES, 0), "reprefill_tokens": 0, "continuations": 0, "moves": 0}
    for sample in samples:
        previous = None
        for chunk in sample.chunks:
            if not chunk.reported:
                continue
            for key, value in chunk_sources(chunk).items():
                totals[key] += value
            if previous is not None:
                totals["continuations"] += 1
                totals["reprefill_tokens"] += chunk.recomputed_tokens
                totals["moves"] += int(chunk.instance != previous)
            previous = chunk.instance
    totals["pool_saved_s"] = (cost or MigrationCost()).saved_s(totals["pool"])
    return totals


def spec_totals(samples: Iterable[Sample]) -> dict[str, float | int | None]:
    steps = accepted = 0
    for sample in samples:
        for chunk in sample.chunks:
            steps += chunk.draft_steps
            accepted += chunk.accepted_tokens
    return {"draft_steps": steps, "accepted_tokens": accepted,
            "mean_acceptance_length": (accepted + steps) / steps if steps else None}
