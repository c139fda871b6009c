"""Stay, load from the pool, or recompute: the price of running a continuation somewhere else.

A pure object shared by the router's instance choice and the simulator. Staying put is a device
cache hit (free); moving costs a pool load for the pages the pool holds and a prefill for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config import KV_POOL


@dataclass(frozen=True)
class MigrationCost:
    prefill_s_per_token: float = 1e-3  # recompute
    load_s_per_token: float = 2.5e-4  # pool read, per token of KV
    load_fixed_s: float = 5e-3  # per continuation: hit query, file opens
    decode_s_per_token: float = 2e-2  # one decode step of the sample, for the overhead share
    page_size: int = KV_POOL.page_size
    page_io_s: float = 0.0  # per page read or written (a file pool opens one file per page)
    # A recompute is a prefill step, priced as the instances' step model prices one (``StepModel.prefill``):
    # a fixed part (kernel launches), at least the weight read while the step is memory-bound, and
    # attention that grows with the context's square. All 0: a recompute is linear in its tokens.
    prefill_fixed_s: float = 0.0
    prefill_memory_s: float = 0.0
    attention_per_pair_s: float = 0.0

    def load_s(self, pooled_tokens: int) -> float:
        """Reading ``pooled_tokens`` (whole pages) from the pool."""
        if pooled_tokens <= 0:
            return 0.0
        pages = -(-pooled_tokens // self.page_size)
        return self.load_fixed_s + self.load_s_per_token * pooled_tokens + self.page_io_s * pages

    def write_s(self, tokens: int) -> float:
        """Writing the whole pages of ``tokens`` of KV through to the pool (as costly as reading them)."""
        pooled = self.pooled(tokens)
        return self.load_s_per_token * pooled + self.page_io_s * (pooled // self.page_size)

    def recompute_s(self, tokens: int) -> float:
        """Prefilling ``tokens`` of context from nothing, as one prefill step."""
        if tokens <= 0:
            return 0.0
        compute = self.prefill_s_per_token * tokens + self.attention_per_pair_s * tokens * tokens / 2
        return self.prefill_fixed_s + max(self.prefill_memory_s, compute)

    def move_s(self, context_tokens: int, pooled_tokens: int = 0) -> float:
        """Seconds a continuation of ``context_tokens`` spends before decoding on a new instance."""
        pooled = min(pooled_tokens, context_tokens)
        return self.load_s(pooled) + self.recompute_s(context_tokens - pooled)

    def saved_s(self, pooled_tokens: int) -> float:
        """Time a pool hit of ``pooled_tokens`` saves over recomputing them."""
        if pooled_tokens <= 0:
            return 0.0
        return max(0.0, self.recompute_s(pooled_tokens) - self.load_s(pooled_tokens))

    def overhead_share(self, context_tokens: int, new_tokens: int, pooled_tokens: int = 0) -> float:
        """Share of the chunk's time a move adds: how much less loaded the target must be to pay."""
        move = self.move_s(context_tokens, pooled_tokens)
        work = new_tokens * self.decode_s_per_token
        return move / (move + work) if move + work > 0 else 0.0

    def pooled(self, context_tokens: int) -> int:
        """Tokens a full write-through pool holds of a context: whole pages only."""
        return context_tokens - context_tokens % self.page_size


@dataclass(frozen=True)
class PoolChoice:
    """Whether the default pool is on, its page size, and the figures that decided it."""

    enabled: bool
    page_size: int
    net_s: float  # per sample: expected time saved by loads, less writes and page waste
    reason: str


def choose_pool(cost: MigrationCost, context_tokens: int, moves_per_sample: float,
                page_sizes: tuple[int, ...] = KV_POOL.auto_page_sizes,
                noise_share: float = KV_POOL.noise_share) -> PoolChoice:
    """On only if the pool costs a sample that never moves no more than noise, and saves when it does.

    A sample of ``context_tokens`` writes every whole page of its KV once (``write_s``), and each
    sibling recomputes on average half a page of the prompt it shares at page granularity (SGLang
    caches whole pages only). Those two are what a rollout where nothing moves pays for the pool;
    they must stay within ``noise_share`` of the sample's own compute (its context, prefilled).
    It moves ``moves_per_sample`` times to an instance that lacks its context, where a load
    replaces a re-prefill. Of the page sizes within the noise bound, the one that saves the most
    per sample (``moves * (recompute - move with pool) - write - waste``) wins, if that is
    positive. Larger pages read fewer pages (a per-page cost dominates a file pool) and waste more
    of a shared prompt.
    """
    budget = noise_share * cost.prefill_s_per_token * context_tokens
    best: PoolChoice | None = None
    for page in page_sizes:
        c = replace(cost, page_size=page)
        pooled = c.pooled(context_tokens)
        saved = moves_per_sample * (c.move_s(context_tokens) - c.move_s(context_tokens, pooled))
        overhead = c.write_s(context_tokens) + c.prefill_s_per_token * (page - 1) / 2
        net = saved - overhead
        enabled = net > 0 and overhead <= budget
        reason = (f"page {page}: a move of a {context_tokens}-token context loads in "
                  f"{c.load_s(pooled) * 1e3:.1f} ms vs {c.prefill_s_per_token * pooled * 1e3:.1f} ms to recompute "
                  f"({moves_per_sample:g} moves per sample save {saved * 1e3:.1f} ms); a sample that never moves "
                  f"pays {overhead * 1e3:.1f} ms of writes and page waste, "
                  f"{'within' if overhead <= budget else 'over'} {noise_share:.0%} of its "
                  f"{cost.prefill_s_per_token * context_tokens * 1e3:.1f} ms of compute")
        candidate = PoolChoice(enabled, page, net, reason)
        if best is None or (enabled, net) > (best.enabled, best.net_s):
            best = candidate
    assert best is not None, "no page size to choose from"
    return best
