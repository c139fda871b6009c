"""Adaptive draft budget: how many draft tokens each request of a decode batch gets verified.

Verifying draft tokens costs step time, and that cost grows with the batch, while the gain (accepted
tokens) does not. A profiled cost model gives the best draft length gamma* for a batch size B; the
batch then shares gamma* * B draft tokens, handed out one token at a time to the request whose next
token is most likely to be accepted, with long-tail (high-priority) requests weighted by lambda.
Pure objects with no I/O: the SGLang plugin and the simulator call the same code.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class CostModel:
    """Step time t(B, n) = base_s + per_seq_s * B + per_token_s * B * n for n verified tokens per
    request (the last verified token plus gamma drafts), and an acceptance curve:
    ``accept_curve[i]`` = probability that draft token i + 1 of a linear draft is accepted
    (non-increasing; zero past its end)."""

    base_s: float
    per_seq_s: float
    per_token_s: float
    accept_curve: tuple[float, ...]

    def step_time(self, batch: int, tokens_per_request: float) -> float:
        return self.base_s + self.per_seq_s * batch + self.per_token_s * batch * tokens_per_request

    def expected_accepted(self, k: int, scores: Sequence[float] | None = None) -> float:
        """Expected accepted draft tokens among the first k: the sum of their acceptance
        probabilities (a node's cumulative path score, or the profiled curve)."""
        probs = self.accept_curve if scores is None else scores
        return float(sum(probs[:k]))

    def tokens_per_second(self, batch: int, gamma: int) -> float:
        """Expected emitted tokens per second of a batch that verifies gamma drafts per request."""
        return batch * (1.0 + self.expected_accepted(gamma)) / self.step_time(batch, gamma + 1)

    def best_gamma(self, batch: int, gamma_max: int = 8) -> int:
        """argmax over gamma in [0, gamma_max] of tokens per second; ties go to the shorter draft."""
        rates = [self.tokens_per_second(batch, g) for g in range(gamma_max + 1)]
        return int(np.argmax(np.asarray(rates) > max(rates) * (1 - 1e-12)))

    @classmethod
    def fit(cls, points: Sequence[tuple[int, float, float]], accept_curve: Sequence[float]) -> "CostModel":
        """Least-squares fit of (base_s, per_seq_s, per_token_s) to measured
        (batch, tokens_per_request, step_seconds) points; negative terms are clipped to zero."""
        a = np.array([[1.0, b, b * n] for b, n, _ in points])
        y = np.array([t for _, _, t in points])
        coef = np.clip(np.linalg.lstsq(a, y, rcond=None)[0], 0.0, None)
        return cls(float(coef[0]), float(coef[1]), float(coef[2]), tuple(float(p) for p in accept_curve))

    @staticmethod
    def geometric_curve(alpha: float, length: int = 8) -> tuple[float, ...]:
        """Curve of a draft whose tokens are each accepted with probability alpha."""
        return tuple(alpha ** (i + 1) for i in range(length))


@dataclass(frozen=True)
class BudgetRequest:
    """A request's candidate draft: ``draft_scores[j]`` is the acceptance probability (cumulative
    path score) of the j-th draft token, in the order the drafter would add them."""

    rid: str
    priority_high: bool
    draft_scores: list[float] = field(default_factory=list)


@dataclass
class BudgetDecision:
    per_request: dict[str, int]
    gamma_star: int
    enabled: bool
    reason: str


def _off(requests: Sequence[BudgetRequest], gamma_star: int, reason: str) -> BudgetDecision:
    return BudgetDecision({r.rid: 0 for r in requests}, gamma_star, False, reason)


class DraftBudget:
    """Seer's allocation: total gamma* * B tokens, greedy by lambda-weighted acceptance probability."""

    def __init__(self, cost: CostModel, gamma_max: int = 8, lam: float = 2.0):
        self.cost = cost
        self.gamma_max = gamma_max
        self.lam = lam
        self._gamma_cache: dict[int, int] = {}

    def gamma_star(self, batch_size: int) -> int:
        if batch_size not in self._gamma_cache:
            self._gamma_cache[batch_size] = self.cost.best_gamma(batch_size, self.gamma_max)
        return self._gamma_cache[batch_size]

    def allocate(self, requests: Sequence[BudgetRequest], batch_size: int | None = None) -> BudgetDecision:
        batch = len(requests) if batch_size is None else batch_size
        gamma = self.gamma_star(batch)
        if gamma == 0:
            return _off(requests, 0, f"best gamma is 0 at batch size {batch}")
        total = gamma * batch
        n_high = sum(r.priority_high for r in requests)
        if total < n_high:
            return _off(requests, gamma, f"budget {total} < {n_high} high-priority requests")

        per = {r.rid: 0 for r in requests}
        heap: list[tuple[float, int, int]] = []  # (-weighted benefit, low priority first?, position)

        def push(pos: int) -> None:
            r = requests[pos]
            j = per[r.rid]
            if j < min(self.gamma_max, len(r.draft_scores)) and r.draft_scores[j] > 0:
                weight = self.lam if r.priority_high else 1.0
                heapq.heappush(heap, (-weight * r.draft_scores[j], not r.priority_high, pos))

        for pos in range(len(requests)):
            push(pos)
        given = 0
        while heap and given < total:
            _, _, pos = heapq.heappop(heap)
            per[requests[pos].rid] += 1
            given += 1
            push(pos)
        return BudgetDecision(per, gamma, True, f"{given} of {total} draft tokens")


@dataclass(frozen=True)
class ThresholdSwitch:
    """The simple policy: a fixed gamma while the batch has at most ``max_batch`` requests, else off."""

    gamma: int = 4
    max_batch: int = 32

    def allocate(self, requests: Sequence[BudgetRequest], batch_size: int | None = None) -> BudgetDecision:
        batch = len(requests) if batch_size is None else batch_size
        if self.gamma == 0:
            return _off(requests, 0, "gamma is 0")
        if batch > self.max_batch:
            return _off(requests, 0, f"batch size {batch} > {self.max_batch}")
        per = {r.rid: min(self.gamma, len(r.draft_scores)) for r in requests}
        return BudgetDecision(per, self.gamma, True, f"fixed gamma {self.gamma}")
