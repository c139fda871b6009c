"""Step-time model of one instance: how long a forward step takes for the batch it runs.

One object serves the simulator (which replaces the engines with it) and the emulated instances
(real SGLang instances whose steps are padded to its times, ``plugin/emulation.py``), so the two can
be held against each other.

A decode or verify step reads the weights and the batch's KV once, and computes every token of the
batch: it takes the larger of the two, plus a fixed cost (launches, all-reduce, scheduling) and a cost
per sequence (sampling, bookkeeping)::

    step = base + per_seq * B + max(weight_read + max(kv_read * K, lone_kv_read * L),
                                    compute * T + attention * (T - B) / B * K)

with B sequences, T tokens (B for decode, B x tree width for a verify), K KV tokens read and L the
longest sequence's length. An attention kernel that does not split a sequence's KV reads it in
order, so a step cannot read faster than its longest sequence allows: a few long sequences (a
rollout's last samples) take ``lone_kv_read`` per token, far more than their share of the bandwidth
(with such a kernel on an H100, one 4,096-token sequence adds as much to a step as 64 of them; a
kernel that splits the KV across the GPU makes the term small). A verify's extra tree nodes (T - B) each
attend to their request's context, about K / B tokens, on the compute side (``tree_attention``;
a decode's one token per request is priced by its KV read). A
prefill of N new tokens over C cached ones computes its tokens and their attention to everything
before them (N * (C + N/2) query-key pairs), and reads the weights at least once::

    prefill = base + prefill_base + max(weight_read, prefill_per_token * N + attention * pairs)

(``prefill_base``, 0 in the public profiles, is a prefill step's own fixed cost: an eager step's kernel
launches, which a decode step's CUDA graph does not pay.)

(a model scaled to shorter lengths charges a share of a prefill's fixed part, see ``scaled``).

A model fitted on CPU (compute-shaped) has ``weight_read = compute = 0``, which reduces the decode step
to base + per_seq * B + kv_read * K, or, where the fit kept its measured batch sizes
(``decode_batch_s``), to their piecewise-linear step time at B plus kv_read * K.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Sequence

from ..config import KV_POOL
from .migration import MigrationCost

PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"


@dataclass(frozen=True)
class StepModel:
    name: str
    decode_base_s: float
    decode_per_seq_s: float
    decode_per_kv_token_s: float  # KV read per token per step, at the achieved bandwidth
    prefill_per_token_s: float
    capacity_tokens: int  # KV tokens one instance holds
    max_running: int = 1024
    source: str = ""
    pool_load_s_per_token: float = 0.0  # global KV pool read, per token (0 = unknown: no pool modelled)
    request_overhead_s: float = 0.0  # per chunk, outside model steps: HTTP, tokenizing, scheduling
    weight_read_s: float = 0.0  # all (active) weights read once, at the achieved bandwidth
    compute_per_token_s: float = 0.0  # matmul time per batch token at the achieved FLOP rate
    attention_per_pair_s: float = 0.0  # prefill attention per (query, key) pair
    kv_bytes_per_token: int = 0  # informative: what the KV read and the capacity were derived from
    prefill_fixed_scale: float = 1.0  # share of a prefill step's fixed cost (base, weight read) charged
    prefill_base_s: float = 0.0  # a prefill step's fixed cost beside decode_base_s (eager launches)
    # KV read per token of the longest sequence, which the attention kernel reads serially (0: not modelled)
    decode_lone_kv_token_s: float = 0.0
    # a verify's tree nodes after each request's first attend to its context on the compute side
    # (attention_per_pair_s per query-key pair); off in profiles whose stored runs priced verifies without it
    tree_attention: bool = False
    # A fit whose step is not linear in the batch (a CPU's): measured (batch, seconds) points at a short
    # context, which replace base + per_seq * B; linear between them and along the last segment after.
    decode_batch_s: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        # points from JSON (a saved fit, an instance's report) arrive as lists: one form for every path
        object.__setattr__(self, "decode_batch_s", tuple((int(b), float(t)) for b, t in self.decode_batch_s))

    def fixed_s(self, batch: int) -> float:
        """A decode step's cost apart from its KV read and compute: base + per_seq * B, or the measured
        points where the fit has them."""
        points = self.decode_batch_s
        if not points:
            return self.decode_base_s + self.decode_per_seq_s * batch
        if len(points) == 1 or batch <= points[0][0]:
            return points[0][1]
        for (b0, t0), (b1, t1) in zip(points, points[1:]):
            if batch <= b1:
                return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
        return t1 + (t1 - t0) * (batch - b1) / (b1 - b0)

    def decode_step(self, batch: int, kv_tokens: int, tokens: int | None = None, longest: int = 0) -> float:
        """One decode (``tokens`` = batch) or verify (``tokens`` = every tree node) step; ``longest``: the
        longest sequence's KV tokens."""
        t = batch if tokens is None else tokens
        memory = self.weight_read_s + max(self.decode_per_kv_token_s * kv_tokens, self.decode_lone_kv_token_s * longest)
        return self.fixed_s(batch) + max(memory, self.compute_per_token_s * t + self._tree_pairs_s(batch, t) * kv_tokens)

    def _tree_pairs_s(self, batch: int, tokens: int) -> float:
        """Attention compute per KV token of the batch for a verify's tree nodes after each request's first:
        each attends to its request's context (a decode's one token per request is priced by its KV read)."""
        if not self.tree_attention or batch <= 0 or tokens <= batch:
            return 0.0
        return self.attention_per_pair_s * (tokens - batch) / batch

    def decode_steps(self, steps: int, batch: int, kv_tokens: int, tokens: int | None = None,
                     growth: float | None = None, longest: int = 0, longest_growth: float = 1.0) -> float:
        """Time of ``steps`` consecutive decode (or verify: ``tokens`` tree nodes) steps of a fixed batch
        whose KV grows by ``growth`` (default ``batch``) tokens per step and its longest sequence by
        ``longest_growth``, in closed form: the batch's KV read, the longest sequence's read and the
        compute each grow linearly, and each step takes the largest."""
        if steps <= 0:
            return 0.0
        t = batch if tokens is None else tokens
        g = batch if growth is None else growth
        kv, lone, pairs = self.decode_per_kv_token_s, self.decode_lone_kv_token_s, self._tree_pairs_s(batch, t)
        lines = [(self.weight_read_s + kv * kv_tokens, kv * g),
                 (self.weight_read_s + lone * longest, lone * longest_growth),
                 (self.compute_per_token_s * t + pairs * kv_tokens, pairs * g)]
        return steps * self.fixed_s(batch) + _sum_max_lines(steps, lines)

    def prefill(self, tokens: int, cached: int = 0) -> float:
        """A prefill of ``tokens`` new tokens after ``cached`` ones (one request, or a batch's sums
        when no attention term is modelled)."""
        return self.prefill_batch([tokens], [cached])

    def prefill_batch(self, new: Sequence[int], cached: Sequence[int]) -> float:
        """One prefill step over requests with ``new[i]`` new tokens after ``cached[i]`` ones."""
        total = sum(new)
        if total <= 0:
            return 0.0
        compute = self.prefill_per_token_s * total
        if self.attention_per_pair_s:
            compute += self.attention_per_pair_s * sum(n * (c + n / 2) for n, c in zip(new, cached))
        if not self.weight_read_s:  # a CPU fit: prefill is linear in tokens, its base is in the fit
            return compute
        f = self.prefill_fixed_scale
        return f * (self.decode_base_s + self.prefill_base_s) + max(f * self.weight_read_s, compute)

    def migration_cost(self, page_size: int = KV_POOL.page_size) -> MigrationCost:
        """The router's move cost on this model: a re-prefill costs what ``prefill`` says one of that
        many tokens costs (its fixed part and weight read too, where the model has them), and a token
        of the chunk a lone request's decode step. Without a pool no sample holds pooled tokens, so
        the same object prices every move as a re-prefill."""
        f, gpu = self.prefill_fixed_scale, bool(self.weight_read_s)
        return MigrationCost(prefill_s_per_token=self.prefill_per_token_s, load_s_per_token=self.pool_load_s_per_token,
                             load_fixed_s=self.decode_base_s, decode_s_per_token=self.decode_step(1, 0),
                             page_size=page_size,
                             prefill_fixed_s=f * (self.decode_base_s + self.prefill_base_s) if gpu else 0.0,
                             prefill_memory_s=f * self.weight_read_s if gpu else 0.0,
                             attention_per_pair_s=self.attention_per_pair_s)

    def scaled(self, length_scale: float, time_scale: float) -> "StepModel":
        """This model for a workload whose lengths are scaled by ``length_scale`` (< 1: shorter), and
        whose every time is stretched by ``time_scale``.

        Per step, the shorter contexts must cost what the full ones would: the KV read per token and
        the attention per pair grow by 1 / ``length_scale`` (a prefill's pairs shrink by its square, its
        tokens and the run's steps by it alone), and an instance holds ``length_scale`` times the KV
        tokens. Batch sizes, weights and compute per token are unchanged.

        A shortened run has ``length_scale`` times the decode steps of the full one but as many
        prefill steps (a sample has as many chunks, a chunk one prefill), so a prefill step's fixed
        cost (base and weight read) shrinks by ``length_scale`` too: prefills then take the share of
        the run they take at full length, and every part of the run scales alike.
        """
        s, x = length_scale, time_scale
        return replace(
            self, name=f"{self.name}@len{s:g}" + (f"x{x:g}" if x != 1 else ""),
            decode_base_s=self.decode_base_s * x, decode_per_seq_s=self.decode_per_seq_s * x,
            decode_per_kv_token_s=self.decode_per_kv_token_s * x / s, prefill_per_token_s=self.prefill_per_token_s * x,
            decode_lone_kv_token_s=self.decode_lone_kv_token_s * x / s,
            capacity_tokens=max(1, int(self.capacity_tokens * s)), weight_read_s=self.weight_read_s * x,
            compute_per_token_s=self.compute_per_token_s * x, attention_per_pair_s=self.attention_per_pair_s * x / s,
            pool_load_s_per_token=self.pool_load_s_per_token * x / s, request_overhead_s=self.request_overhead_s * x,
            prefill_fixed_scale=self.prefill_fixed_scale * s, prefill_base_s=self.prefill_base_s * x,
            decode_batch_s=tuple((b, t * x) for b, t in self.decode_batch_s))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> "StepModel":
        """A model file; keys starting with ``_`` are documentation and ignored."""
        return cls.from_dict(json.loads(Path(path).read_text()), source=str(path))

    @classmethod
    def from_dict(cls, data: dict, source: str = "step model", strict: bool = True) -> "StepModel":
        """The model of ``data``'s own keys; with ``strict``, another key (not starting with ``_``, which
        marks documentation) is an error, since it is most likely a misspelt one."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(k for k in data if k not in known and not k.startswith("_"))
        if strict and unknown:
            raise ValueError(f"{source}: unknown step-model keys {unknown}")
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Admission:
    """SGLang's admission and retraction rule (0.5.23 defaults), which the simulator follows and an
    emulated instance is set to.

    SGLang admits a request when its prompt plus ``min(max_new_tokens, clip)`` fits beside what the
    running requests may still write, each counted as ``ratio * min(remaining, clip)``. The ratio
    starts at ``init_ratio``, falls linearly to ``init_ratio * min_ratio_factor`` over
    ``decay_steps`` decode steps without a retraction, returns to ``init_ratio`` when the instance goes
    idle, and after a retraction becomes (written + ``retract_steps`` per request) / their budgets.
    Three of these count tokens or steps: a workload scaled to shorter lengths scales them alike, or a
    short run would never reach the optimistic admission (and the retractions) of a long one.
    """

    init_ratio: float = 0.7
    min_ratio_factor: float = 0.14
    decay_steps: int = 600
    retract_steps: int = 20
    clip_max_new: int = 4096

    @property
    def min_ratio(self) -> float:
        return self.init_ratio * self.min_ratio_factor

    @property
    def decay(self) -> float:
        return (self.init_ratio - self.min_ratio) / self.decay_steps

    def scaled(self, length_scale: float) -> "Admission":
        return replace(self, decay_steps=max(1, round(self.decay_steps * length_scale)),
                       retract_steps=max(1, round(self.retract_steps * length_scale)),
                       clip_max_new=max(1, round(self.clip_max_new * length_scale)))

    def sglang_env(self) -> dict[str, str]:
        """The environment that sets an SGLang instance to this rule."""
        return {"SGLANG_INIT_NEW_TOKEN_RATIO": str(self.init_ratio),
                "SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR": str(self.min_ratio_factor),
                "SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS": str(self.decay_steps),
                "SGLANG_RETRACT_DECODE_STEPS": str(self.retract_steps),
                "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION": str(self.clip_max_new)}


def _sum_max_lines(n: int, lines: list[tuple[float, float]]) -> float:
    """sum over k < n of max over ``lines`` (a, b) of a + b * k. Between the integers where two lines
    cross one line is the largest throughout, so the sum is a few arithmetic series."""
    cuts = {0, n}
    for i, (a1, b1) in enumerate(lines):
        for a2, b2 in lines[i + 1:]:
            if b1 != b2:
                x = (a2 - a1) / (b1 - b2)
                if 0 < x < n:
                    cuts.add(math.ceil(x))
    total = 0.0
    bounds = sorted(cuts)
    for k0, k1 in zip(bounds, bounds[1:]):
        a, b = max(lines, key=lambda line: (line[0] + line[1] * k0, line[1]))  # a tie at k0: the steeper leads after
        total += (k1 - k0) * a + b * (k0 + k1 - 1) * (k1 - k0) / 2
    return total


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.json"))


def emulated_model(profile: str | None, length_scale: float, time_scale: float) -> StepModel | None:
    """The model an emulated instance pads its steps to (``--emulate`` and its scales); None without one."""
    if not profile:
        return None
    return load_profile(profile).scaled(length_scale, time_scale)


def emulated_move_cost(profile: str | None, length_scale: float, time_scale: float) -> MigrationCost | None:
    """What moving a continuation costs on emulated instances (``StepModel.migration_cost`` of the model they
    pad their steps to), for the router's affinity rule; None without ``--emulate``: the policy's fixed
    defaults."""
    model = emulated_model(profile, length_scale, time_scale)
    return model.migration_cost() if model is not None else None


def load_profile(name_or_path: str) -> StepModel:
    """A shipped profile by name (``seer_sglang/profiles/<name>.json``), or a user's file."""
    path = PROFILES_DIR / f"{name_or_path}.json"
    if not path.is_file():
        path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"no step-time profile {name_or_path!r}: give a file or one of {profile_names()}")
    return StepModel.load(path)
