"""Stay, load from the pool, or recompute: the price of running a continuation somewhere else.

A pure object shared by the router's instance choice and the simulator. Staying put is a device
cache hit (free); moving costs a pool load for the pages the pool holds and a prefill for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import KV_POOL


@dataclass(frozen=True)
class MigrationCost:
    prefill_s_per_token: float = 1e-3  # recompute
    load_s_per_token: float = 2.5e-4  # pool read, per token of KV
    load_fixed_s: float = 5e-3  # per continuation: hit query, file opens
    decode_s_per_token: float = 2e-2  # one decode step of the sample, for the overhead share
    page_size: int = KV_POOL.page_size

    def move_s(self, context_tokens: int, pooled_tokens: int = 0) -> float:
        """Seconds a continuation of ``context_tokens`` spends before decoding on a new instance."""
        pooled = min(pooled_tokens, context_tokens)
        recompute = context_tokens - pooled
        load = self.load_fixed_s + self.load_s_per_token * pooled if pooled > 0 else 0.0
        return load + self.prefill_s_per_token * recompute

    def saved_s(self, pooled_tokens: int) -> float:
        """Time a pool hit of ``pooled_tokens`` saves over recomputing them."""
        if pooled_tokens <= 0:
            return 0.0
        return max(0.0, (self.prefill_s_per_token - self.load_s_per_token) * pooled_tokens - self.load_fixed_s)

    def overhead_share(self, context_tokens: int, new_tokens: int, pooled_tokens: int = 0) -> float:
        """Share of the chunk's time a move adds: how much less loaded the target must be to pay."""
        move = self.move_s(context_tokens, pooled_tokens)
        work = new_tokens * self.decode_s_per_token
        return move / (move + work) if move + work > 0 else 0.0

    def pooled(self, context_tokens: int) -> int:
        """Tokens a full write-through pool holds of a context: whole pages only."""
        return context_tokens - context_tokens % self.page_size
