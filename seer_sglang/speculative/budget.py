"""Adaptive draft budget: how many draft tokens each request of a decode batch gets verified.

Verifying draft tokens costs step time, and that cost grows with the batch, while the gain (accepted
tokens) does not. A profiled cost model gives the best draft length gamma* for a batch size B; the
batch then shares gamma* * B draft tokens, handed out one token at a time to the request whose next
token is most likely to be accepted, with long-tail (high-priority) requests weighted by lambda.
Pure objects with no I/O: the SGLang plugin and the simulator call the same code.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import MISSING, dataclass, field, fields
from typing import Sequence

import numpy as np

from ..config import BUDGETS, VERIFY_LAYOUTS
from ..core.step_model import StepModel


@dataclass(frozen=True)
class CostModel:
    """Step time t(B, n) = base_s + per_seq_s * B + per_token_s * B * n for n verified tokens per
    request (the last verified token plus gamma drafts), plus verify_base_s + verify_per_seq_s * B when
    the step verifies drafts (n > 1): the tree mask, the acceptance walk and the KV moves that a plain
    decode step (n = 1) does without. And an acceptance curve: ``accept_curve[i]`` = probability that
    draft token i + 1 of a linear draft is accepted (non-increasing; zero past its end).

    With ``memory_s`` (a GPU profile's weight read) the token term is a roofline instead:
    max(memory_s + kv_s_per_token * K, per_token_s * B * n + pair_s * (n - 1) * K) for a step that reads
    K KV tokens (``pair_s``: each tree node after a request's first attends to its context). A
    memory-bound decode step computes far less than it reads, so drafts verify for free until their
    compute passes the read; a linear model would price every one. The KV read is part of that read:
    a batch of long contexts verifies more drafts for free than the weights alone would say."""

    base_s: float
    per_seq_s: float
    per_token_s: float
    accept_curve: tuple[float, ...]
    verify_base_s: float = 0.0
    verify_per_seq_s: float = 0.0
    memory_s: float = 0.0
    kv_s_per_token: float = 0.0  # memory time per KV token the step reads (with ``memory_s``)
    pair_s: float = 0.0  # compute per (tree node after a request's first, context token) pair: tree attention

    def step_time(self, batch: int, tokens_per_request: float, kv_tokens: int = 0) -> float:
        verify = self.verify_base_s + self.verify_per_seq_s * batch if tokens_per_request > 1 else 0.0
        tokens = self.per_token_s * batch * tokens_per_request + self.pair_s * max(0.0, tokens_per_request - 1) * kv_tokens
        memory = self.memory_s + self.kv_s_per_token * kv_tokens if self.memory_s else 0.0
        return self.base_s + self.per_seq_s * batch + max(memory, tokens) + verify

    @classmethod
    def from_step_model(cls, model: StepModel, accept_curve: Sequence[float],
                        verify_per_token_s: float | None = None, kv_read: bool = True) -> "CostModel":
        """The step-time terms of a ``StepModel``: a GPU profile's roofline (weights and, with
        ``kv_read``, the batch's KV read, as the profile's decode step has them), or a CPU fit's linear
        step, whose verified tokens each cost a prefill token (or ``verify_per_token_s``)."""
        curve = tuple(float(p) for p in accept_curve)
        if model.compute_per_token_s and verify_per_token_s is None:
            return cls(model.decode_base_s, model.decode_per_seq_s, model.compute_per_token_s, curve,
                       memory_s=model.weight_read_s, kv_s_per_token=model.decode_per_kv_token_s if kv_read else 0.0,
                       pair_s=model.attention_per_pair_s if model.tree_attention and kv_read else 0.0)
        per_token = model.prefill_per_token_s if verify_per_token_s is None else verify_per_token_s
        return cls(model.decode_base_s + model.weight_read_s, max(0.0, model.decode_per_seq_s - per_token),
                   per_token, curve)

    def expected_accepted(self, k: int, scores: Sequence[float] | None = None) -> float:
        """Expected accepted draft tokens among the first k: the sum of their acceptance
        probabilities (a node's cumulative path score, or the profiled curve)."""
        probs = self.accept_curve if scores is None else scores
        return float(sum(probs[:k]))

    def tokens_per_second(self, batch: int, gamma: int, kv_tokens: int = 0) -> float:
        """Expected emitted tokens per second of a batch that verifies gamma drafts per request."""
        return batch * (1.0 + self.expected_accepted(gamma)) / self.step_time(batch, gamma + 1, kv_tokens)

    def best_gamma(self, batch: int, gamma_max: int = 8, kv_tokens: int = 0) -> int:
        """argmax over gamma in [0, gamma_max] of tokens per second; ties go to the shorter draft."""
        rates = [self.tokens_per_second(batch, g, kv_tokens) for g in range(gamma_max + 1)]
        return int(np.argmax(np.asarray(rates) > max(rates) * (1 - 1e-12)))

    @classmethod
    def fit(cls, points: Sequence[tuple[int, float, float]], accept_curve: Sequence[float]) -> "CostModel":
        """Non-negative least-squares fit of the five time terms to measured (batch, tokens_per_request,
        step_seconds) points. The verify terms need steps with and without drafts; without plain
        steps they stay zero (the base terms absorb them)."""
        from scipy.optimize import nnls

        with_plain = any(n <= 1 for _, n, _ in points)
        a = np.array([[1.0, b, b * n, float(n > 1 and with_plain), b * float(n > 1 and with_plain)]
                      for b, n, _ in points])
        y = np.array([t for _, _, t in points])
        scale = np.maximum(np.abs(a).max(axis=0), 1e-12)  # columns of equal size: nnls is scale-sensitive
        coef = nnls(a / scale, y)[0] / scale
        return cls(float(coef[0]), float(coef[1]), float(coef[2]), tuple(float(p) for p in accept_curve),
                   float(coef[3]), float(coef[4]))

    @staticmethod
    def geometric_curve(alpha: float, length: int = 8) -> tuple[float, ...]:
        """Curve of a draft whose tokens are each accepted with probability alpha."""
        return tuple(alpha ** (i + 1) for i in range(length))


def kv_bucket(tokens: int) -> int:
    """``tokens`` to its 4 leading bits (within 1/8 below it)."""
    tokens = max(0, int(tokens))
    drop = max(0, tokens.bit_length() - 4)
    return tokens >> drop << drop


def verify_layout(name: str, cpu: bool, lora: bool = False) -> str:
    """``--verify-layout`` as an instance runs it: ``auto`` is ``ragged`` on a CPU and ``full`` on a GPU,
    where the bucketed verify has yet to be measured against the full width's captured graphs. With
    ``lora`` a ragged verify is bucketed: SGLang's LoRA layers take a verify batch with one width for
    every request."""
    if name not in VERIFY_LAYOUTS:
        raise ValueError(f"unknown verify layout {name!r}; choose one of {VERIFY_LAYOUTS}")
    layout = ("ragged" if cpu else "full") if name == "auto" else name
    return "bucketed" if lora and layout == "ragged" else layout


# The most draft tokens a request may be given a step where ``--draft-tokens`` is not set, by verify layout.
# A ragged verify computes only the drafts the budget gives out: a high ceiling costs nothing in a full
# batch, where the budget gives out one or two, and lets a rollout's last samples, alone on an instance,
# verify long drafts. A padded verify pays for its width on every request of every step.
AUTO_DRAFT_TOKENS = {"ragged": 32, "bucketed": 8, "full": 8}


def draft_tokens_for(layout: str, given: int | None = None) -> int:
    """``--draft-tokens`` as an instance of ``layout`` (``verify_layout``'s answer) runs it."""
    return given if given is not None else AUTO_DRAFT_TOKENS[layout]


def verify_buckets(full_width: int) -> tuple[int, ...]:
    """The widths a bucketed verify runs at (nodes per request: the last verified token and its drafts):
    the powers of two below the full width, and the full width. A device captures one graph per bucket."""
    widths, w = [], 1
    while w < full_width:
        widths.append(w)
        w *= 2
    return (*widths, full_width)


def verify_width(layout: str, needed: int, full_width: int) -> int:
    """A verify step's width in ``layout`` (as ``verify_layout`` resolves it) for ``needed`` nodes in its
    widest request: those nodes (ragged), their bucket (bucketed; 1, no drafts at all, is a bucket of
    its own), or the full width."""
    if layout == "ragged":
        return needed
    return bucket_width(needed, verify_buckets(full_width)) if layout == "bucketed" else full_width


def bucket_width(needed: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``needed`` nodes: the widest request of the step, whose tree then
    fits whole, and every other request's within it."""
    for width in sorted(buckets):
        if width >= needed:
            return width
    raise ValueError(f"{needed} verify nodes are more than the widest bucket ({max(buckets)})")


HIGH_PRIORITY_SHARE = 0.25  # the batch's top quarter by router priority counts as long-tail


def high_priority(priorities: Sequence[int | None]) -> list[bool]:
    """The requests in the top ``HIGH_PRIORITY_SHARE`` of the batch by router priority (the router
    ranks the samples it expects to run longest first); none when no request carries one."""
    known = sorted((p for p in priorities if p is not None), reverse=True)
    if not known:
        return [False] * len(priorities)
    cut = known[max(0, int(len(known) * HIGH_PRIORITY_SHARE) - 1)]
    return [p is not None and p >= cut for p in priorities]


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
        self._gamma_cache: dict[tuple[int, int], int] = {}

    def gamma_star(self, batch_size: int, kv_tokens: int = 0) -> int:
        """gamma* of a batch that reads ``kv_tokens`` KV tokens a step (counted where the cost model
        prices the KV read, to its 4 leading bits: the answer moves little within that)."""
        kv = kv_bucket(kv_tokens) if self.cost.kv_s_per_token else 0
        key = (batch_size, kv)
        if key not in self._gamma_cache:
            self._gamma_cache[key] = self.cost.best_gamma(batch_size, self.gamma_max, kv)
        return self._gamma_cache[key]

    def allocate(self, requests: Sequence[BudgetRequest], batch_size: int | None = None,
                 gamma: int | None = None, kv_tokens: int = 0) -> BudgetDecision:
        """Split gamma * B draft tokens (gamma = gamma* of the batch size unless given)."""
        batch = len(requests) if batch_size is None else batch_size
        gamma = self.gamma_star(batch, kv_tokens) if gamma is None else gamma
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
    rates = None  # a fixed rule measures nothing

    def current_model(self) -> CostModel | None:
        return None

    def record_step(self, batch: int, gamma: int, verified: Sequence[int], accepted: Sequence[int],
                    seconds: float) -> None:
        """A fixed rule learns nothing from the steps it ran."""

    def gamma_star(self, batch_size: int, kv_tokens: int = 0) -> int:
        return self.gamma if batch_size <= self.max_batch else 0

    def allocate(self, requests: Sequence[BudgetRequest], batch_size: int | None = None,
                 gamma: int | None = None, kv_tokens: int = 0) -> BudgetDecision:
        batch = len(requests) if batch_size is None else batch_size
        gamma = self.gamma_star(batch) if gamma is None else gamma
        if gamma == 0:
            return _off(requests, 0, "gamma is 0" if self.gamma == 0 else f"batch size {batch} > {self.max_batch}")
        per = {r.rid: min(gamma, len(r.draft_scores)) for r in requests}
        return BudgetDecision(per, gamma, True, f"fixed gamma {gamma}")


class OnlineCost:
    """A cost model an instance fits to its own verify steps, for when no offline profile is given.

    Step times come from a sliding window of (batch, verified tokens per request, seconds); the
    widths vary by themselves because a request verifies only the drafts it has. The acceptance curve
    counts, per draft position i, how often a request that verified at least i drafts accepted them.
    ``model()`` is None until the window shows at least ``min_widths`` widths (two for the draft budget,
    which must tell verify steps from plain ones; one for SLO admission, which prices plain decode
    steps). A step of width 1 is a plain decode step (no drafts anywhere in the batch).

    With ``times`` (an emulated instance: its steps last what its profile says, whatever the host
    spent) only the acceptance curve is learned; ``model()`` is ``times`` with it, once the faded
    count of requests that verified a draft reaches ``min_points``.
    """

    ACCEPT_HALF_LIFE = 512

    def __init__(self, gamma_max: int = 8, window: int = 256, min_points: int = 32, min_widths: int = 2,
                 per_batch: int | None = None, times: CostModel | None = None):
        self.times = times
        self.gamma_max = gamma_max
        self.points: list[tuple[int, float, float]] = []
        self.window = window
        self.min_points = min_points
        self.min_widths = min_widths
        # With per_batch, the window keeps the last per_batch steps of each batch size instead of the last
        # ``window`` steps: a long run at one batch size (a rollout) does not push out the few steps at
        # other sizes that tell the per-sequence cost from the fixed one.
        self.per_batch = per_batch
        self._by_batch: dict[int, list[tuple[int, float, float]]] = {}
        self.tried = np.zeros(gamma_max, dtype=np.float64)
        self.accepted = np.zeros(gamma_max, dtype=np.float64)
        self._fitted: CostModel | None = None
        self._stale = True

    def record_step(self, batch: int, tokens_per_request: float, seconds: float) -> None:
        """One step; ``tokens_per_request`` is the mean over the batch (a ragged verify's total / B)."""
        point = (batch, float(tokens_per_request), seconds)
        if self.per_batch is None:
            self.points.append(point)
            del self.points[:-self.window]
        else:
            kept = self._by_batch.setdefault(batch, [])
            kept.append(point)
            del kept[:-self.per_batch]
            self.points = [p for ps in self._by_batch.values() for p in ps]
        self._stale = True

    def mean_step_s(self) -> dict[int, float]:
        """Batch size -> mean seconds of the steps the window holds at that size (what was measured,
        beside the fit)."""
        by_batch: dict[int, list[float]] = {}
        for batch, _, seconds in self.points:
            by_batch.setdefault(batch, []).append(seconds)
        return {b: sum(ts) / len(ts) for b, ts in sorted(by_batch.items())}

    def record_acceptance(self, verified: Sequence[int], accepted: Sequence[int]) -> None:
        """Per request of one step: drafts verified, and how many of them were accepted."""
        drafted = sum(1 for k in verified if k > 0)
        if drafted:
            fade = 0.5 ** (drafted / self.ACCEPT_HALF_LIFE)
            self.tried *= fade
            self.accepted *= fade
        for k, a in zip(verified, accepted):
            k = min(int(k), self.gamma_max)
            self.tried[:k] += 1
            self.accepted[:min(int(a), k)] += 1
        self._stale = True

    def curve(self) -> tuple[float, ...]:
        rates = np.divide(self.accepted, self.tried, out=np.zeros_like(self.accepted), where=self.tried > 0)
        return tuple(float(r) for r in np.minimum.accumulate(rates))

    def model(self) -> CostModel | None:
        if self._stale:
            self._stale = False
            if self.times is not None:
                if self.tried[0] >= self.min_points:
                    self._fitted = dataclasses.replace(self.times, accept_curve=self.curve())
                return self._fitted
            widths = {n for _, n, _ in self.points}
            if len(self.points) >= self.min_points and len(widths) >= self.min_widths:
                self._fitted = CostModel.fit(self.points, self.curve())
        return self._fitted


class MeasuredRates:
    """Emitted tokens per request-second of the steps an instance ran, per batch-size bucket (powers
    of two) and draft length: the check on the online fit. A linear fit of step time misjudges a CPU
    whose matmuls turn from memory- to compute-bound within one rollout's batch sizes, and it rarely
    sees plain steps once drafting is on; the measured rates of both arms do not depend on its form."""

    DECAY = 0.2  # weight of the newest step: the rates follow contexts growing and siblings finishing
    MIN_STEPS = 3

    def __init__(self) -> None:
        self._rate: dict[tuple[int, int], float] = {}
        self._steps: dict[tuple[int, int], int] = {}

    @staticmethod
    def _key(batch: int, gamma: int) -> tuple[int, int]:
        return max(1, batch).bit_length(), gamma

    def record(self, batch: int, gamma: int, emitted: int, seconds: float) -> None:
        """One step that drafted up to ``gamma`` tokens per request and emitted ``emitted`` tokens."""
        if batch <= 0 or seconds <= 0:
            return
        key, rate = self._key(batch, gamma), emitted / (batch * seconds)
        old = self._rate.get(key)
        self._rate[key] = rate if old is None else old + self.DECAY * (rate - old)
        self._steps[key] = self._steps.get(key, 0) + 1

    def rate(self, batch: int, gamma: int) -> float | None:
        """The smoothed rate, None until MIN_STEPS steps of this arm were seen."""
        key = self._key(batch, gamma)
        return self._rate[key] if self._steps.get(key, 0) >= self.MIN_STEPS else None

    def summary(self, batch: int) -> str:
        """The measured arms at this batch size, for the logs: "0: 2.10, 2: 1.75" (tokens/request-s)."""
        b = self._key(batch, 0)[0]
        return ", ".join(f"{g}: {r:.2f}" for (k, g), r in sorted(self._rate.items()) if k == b) or "none yet"

    def pays(self, batch: int, gamma: int) -> bool:
        """False only where both this draft length and no drafts were measured, and drafts lost."""
        with_drafts, plain = self.rate(batch, gamma), self.rate(batch, 0)
        return with_drafts is None or plain is None or with_drafts >= plain


def exploration_loss(cost: CostModel, batch: int, chosen: int, trial: int, kv_tokens: int = 0) -> float:
    """Seconds a step that verifies ``trial`` drafts per request is expected to lose against one at the
    chosen length: its time, less the time the chosen length takes for the tokens the trial emits."""
    tokens = batch * (1.0 + cost.expected_accepted(trial))
    return max(0.0, cost.step_time(batch, trial + 1, kv_tokens)
               - tokens / cost.tokens_per_second(batch, chosen, kv_tokens))


class AdaptiveBudget:
    """``DraftBudget`` over a fixed profile (``cost``) or, without one, over ``OnlineCost``'s fit.

    Until the fit exists, the draft length cycles through ``PROFILE_LENGTHS``: short, so profiling
    costs little where drafts do not pay, and several widths, so the fit has points to separate. The
    fit only sees the steps the budget chose, so now and then a step tries another length (the next of
    ``EXPLORE_LENGTHS`` when gamma* = 0; no drafts or twice gamma* otherwise): it keeps measuring plain
    decode and verify steps, and turns drafts back on when acceptance rises (siblings finish).
    Exploring is paid for: a step explores at most every ``EXPLORE_EVERY`` steps, and only once the
    time it is expected to lose against gamma* (by the current fit) is covered by a credit of
    ``EXPLORE_SHARE`` of every step's expected time. So a large batch, where a wide verify costs
    several plain steps, explores rarely, and a small one (the long tail) often. The fit's gamma* is
    checked against the measured rates (``MeasuredRates``): where steps at that length emitted fewer
    tokens per second than plain steps at the same batch size, the budget drafts nothing."""

    PROFILE_LENGTHS = (0, 1, 2, 4)
    EXPLORE_EVERY = 16
    EXPLORE_LENGTHS = (1, 2, 4, 8)
    EXPLORE_SHARE = 0.02
    CREDIT_STEPS = 1024  # the credit saved up is capped at this many steps' worth

    def __init__(self, cost: CostModel | None = None, gamma_max: int = 8, lam: float = 2.0,
                 times: CostModel | None = None):
        self.online = None if cost is not None else OnlineCost(gamma_max, times=times)
        self.rates = MeasuredRates()
        self.gamma_max = gamma_max
        self.lam = lam
        self._budget = DraftBudget(cost, gamma_max, lam) if cost is not None else None
        self._model: CostModel | None = cost
        self._steps = 0
        self._explored = 0
        self._last_explore = 0
        self._credit_s = 0.0

    def _fitted(self) -> DraftBudget | None:
        """The budget over the current model; None while the online fit has too few steps."""
        if self.online is not None:
            model = self.online.model()
            if model is None:
                return None
            if model is not self._model:
                self._model, self._budget = model, DraftBudget(model, self.gamma_max, self.lam)
        return self._budget

    def current_model(self) -> CostModel | None:
        """The cost model the budget decides by now (None while profiling)."""
        budget = self._fitted()
        return budget.cost if budget is not None else None

    def gamma_star(self, batch_size: int, kv_tokens: int = 0) -> int:
        """This step's draft length for a batch that reads ``kv_tokens`` KV tokens."""
        budget = self._fitted()
        if self.online is None:
            return budget.gamma_star(batch_size, kv_tokens)
        self._steps += 1
        if budget is None:
            return min(self.gamma_max, self.PROFILE_LENGTHS[self._steps % len(self.PROFILE_LENGTHS)])
        chosen = budget.gamma_star(batch_size, kv_tokens)
        # The measured rates check a fit of the host's steps; known step times (an emulated profile) need
        # no check, and the host's time is what they replace.
        if chosen and self.online.times is None and not self.rates.pays(batch_size, chosen):
            chosen = 0
        cost = budget.cost
        step_s = cost.step_time(batch_size, chosen + 1, kv_tokens)
        self._credit_s = min(self._credit_s + self.EXPLORE_SHARE * step_s,
                             self.EXPLORE_SHARE * self.CREDIT_STEPS * step_s)
        if self._steps - self._last_explore < self.EXPLORE_EVERY:
            return chosen
        n = self._explored + 1
        if chosen == 0:
            trial = min(self.gamma_max, self.EXPLORE_LENGTHS[n % len(self.EXPLORE_LENGTHS)])
        else:
            trial = 0 if n % 2 else min(self.gamma_max, 2 * chosen)
        loss = exploration_loss(cost, batch_size, chosen, trial, kv_tokens)
        if loss > self._credit_s:
            return chosen
        self._credit_s -= loss
        self._explored, self._last_explore = n, self._steps
        return trial

    def record_step(self, batch: int, gamma: int, verified: Sequence[int], accepted: Sequence[int],
                    seconds: float) -> None:
        """One decode step of the instance: the draft length it ran at, per request the drafts verified
        and accepted, and its time. Feeds the online fit and the measured rates."""
        if self.online is not None:
            self.online.record_step(batch, 1 + sum(verified) / max(1, batch), seconds)
            if any(verified):
                self.online.record_acceptance(verified, accepted)
        self.rates.record(batch, gamma, batch + sum(accepted), seconds)

    def allocate(self, requests: Sequence[BudgetRequest], batch_size: int | None = None,
                 gamma: int | None = None, kv_tokens: int = 0) -> BudgetDecision:
        """While profiling, every request drafts the profiled length; then Seer's split of gamma * B.
        ``gamma``: this step's ``gamma_star`` when the caller already asked (it counts steps)."""
        batch = len(requests) if batch_size is None else batch_size
        gamma = self.gamma_star(batch, kv_tokens) if gamma is None else gamma
        budget = self._fitted()
        if budget is None:
            return BudgetDecision({r.rid: min(gamma, len(r.draft_scores)) for r in requests}, gamma, gamma > 0,
                                  "profiling")
        return budget.allocate(requests, batch, gamma)


def load_cost(path: str) -> CostModel:
    """A profile file: ``CostModel`` fields, or a ``StepModel`` (the simulator's calibration) whose
    decode and prefill costs give the verify cost, with a geometric acceptance curve
    (``accept_rate``, default 0.6)."""
    import json
    from pathlib import Path

    data = json.loads(Path(path).read_text())
    if "per_token_s" in data:
        return CostModel(data["base_s"], data["per_seq_s"], data["per_token_s"], tuple(data["accept_curve"]),
                         data.get("verify_base_s", 0.0), data.get("verify_per_seq_s", 0.0), data.get("memory_s", 0.0),
                         data.get("kv_s_per_token", 0.0))
    required = {f.name for f in fields(StepModel) if f.default is MISSING and f.name != "name"}
    if not required <= data.keys():
        raise ValueError(f"{path}: neither CostModel fields (base_s, per_seq_s, per_token_s, accept_curve) nor a "
                         f"StepModel (missing {sorted(required - data.keys())})")
    model = StepModel.from_dict({"name": Path(path).stem, **data}, source=path, strict=False)  # may carry accept_rate
    return CostModel.from_step_model(model, CostModel.geometric_curve(data.get("accept_rate", 0.6)))


def make_budget(name: str, gamma_max: int, cost_path: str | None = None, times: StepModel | None = None,
                kv_read: bool = True):
    """``adaptive`` (Seer's budget), ``threshold`` (fixed gamma below a batch size) or ``full`` (every
    draft token, every step): ``config.BUDGETS``, the names of ``launch_server --draft-budget``.
    ``times``: the step model an emulated instance runs on, whose step times the adaptive budget then
    takes instead of fitting them (it still learns acceptance)."""
    if name == "adaptive":
        known = CostModel.from_step_model(times, (), kv_read=kv_read) if times is not None and not cost_path else None
        return AdaptiveBudget(load_cost(cost_path) if cost_path else None, gamma_max, times=known)
    if name == "threshold":
        return ThresholdSwitch(gamma=gamma_max)
    if name == "full":
        return ThresholdSwitch(gamma=gamma_max, max_batch=1 << 30)
    raise ValueError(f"unknown draft budget {name!r}; choose one of {BUDGETS}")
