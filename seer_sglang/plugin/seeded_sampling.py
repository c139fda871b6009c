"""Per-request seeded sampling inside SGLang, for chunk- and migration-invariant RL samples.

SGLang's torch sampler can draw each token with Gumbel noise hashed from (seed, position, token),
but only uses it under ``--enable-deterministic-inference``. This hook gives every request of a
batch its seed tensor: the seed the request carries, or a random one fixed for its lifetime. The
noise then depends only on (seed, absolute position), so a sample continued in another chunk, or on
another instance, draws exactly the tokens the unchunked run would, and each draw is still an exact
sample of the model's distribution.

Only the torch sampling backend implements seeded draws; with another backend the hook does nothing
and says so, once per process, as a warning (the launcher picks the torch backend unless told not to).
"""

from __future__ import annotations

import logging
import secrets

logger = logging.getLogger("seer_sglang.plugin")
_warned = False
TARGET = "sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo.from_schedule_batch"


def _batch_of(args, kwargs):
    for value in list(args) + list(kwargs.values()):
        if hasattr(value, "reqs"):
            return value
    return None


def seed_every_request(result, *args, **kwargs):
    """AFTER hook: fill ``sampling_seed`` for the whole batch (merges need it on every batch)."""
    import torch
    from sglang.srt.runtime_context import get_exec

    global _warned
    backend = get_exec().kernel.sampling_backend
    if backend != "pytorch":
        if not _warned:
            _warned = True
            logger.warning("SEEDED SAMPLING IS OFF in this instance (sampling backend %s): chunked or migrated "
                           "samples draw other tokens than unchunked ones; start it with --sampling-backend "
                           "pytorch to keep them identical", backend)
        return result
    if result.sampling_seed is not None:
        return result
    batch = _batch_of(args, kwargs)
    if batch is None:
        return result
    seeds = []
    for req in batch.reqs:
        params = req.sampling_params
        if params.sampling_seed is None:
            params.sampling_seed = secrets.randbits(62)
        seeds.append(params.sampling_seed)
    result.sampling_seed = torch.tensor(seeds, dtype=torch.int64, device=result.temperatures.device)
    return result


_MASK32 = 0xFFFFFFFF


def _rotl32(x, r: int):
    return ((x << r) | (x >> (32 - r))) & _MASK32


def _murmur3_mix(h, k):
    k = (k * 0xCC9E2D51) & _MASK32  # int64 products wrap, but their low 32 bits are exact
    k = _rotl32(k, 15)
    k = (k * 0x1B873593) & _MASK32
    h = h ^ k
    h = _rotl32(h, 13)
    return (h * 5 + 0xE6546B64) & _MASK32


def _row_hash(seed, positions):
    """The part of the hash that depends on the row only (seed, position): [n] int64."""
    import torch

    seed = seed.to(torch.int64)
    pos = positions.to(torch.int64) & _MASK32
    h = torch.zeros_like(seed)
    h = _murmur3_mix(h, seed & _MASK32)
    h = _murmur3_mix(h, (seed >> 32) & _MASK32)
    return _murmur3_mix(h, pos)


def _column_hash(row, col):
    """The rest of the hash, for every (row state, column) pair the two broadcast to."""
    import torch

    row, col = torch.broadcast_tensors(row, col.to(torch.int64) & _MASK32)
    h = _murmur3_mix(row, col)
    h = h ^ 16
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK32
    return h ^ (h >> 16)


def murmur_hash32_torch(seed, positions, col_indices):
    """Torch twin of SGLang's Triton ``murmur_hash32_kernel`` (bit-identical), for CPU tensors: [n, m].

    SGLang's CPU path calls an ``sgl_kernel`` op that only its CUDA/AMX wheel provides.
    """
    return _column_hash(_row_hash(seed, positions).view(-1, 1), col_indices.view(1, -1))


def _gumbel(hashed, logprobs):
    """SGLang's ``multinomial_with_seed`` noise on hashes, added to the log-probabilities (float64)."""
    import torch

    x = hashed.to(torch.float64) / torch.iinfo(torch.uint32).max
    x.log_().clamp_(min=torch.finfo(x.dtype).min, max=-(2.0**-32)).neg_()
    x.log_().neg_()
    return x.add_(logprobs.to(torch.float64))


SPARSE_SHARE = 0.25  # the sparse draw pays once a row keeps fewer than this share of the vocabulary


def seeded_draw_sparse(logprobs, seed, positions):
    """``multinomial_with_seed`` over the tokens each row can draw, [n, 1]; None where it would not pay.

    A token with log-probability -inf never wins the Gumbel argmax, so only the others need noise: a
    forced token, top-k or top-p leave a few per row, and hashing the whole vocabulary for each
    (about thirty int64 passes over ``n x vocabulary`` on CPU) costs more than the model's step. The
    draw is the same token: the same hash and noise at the same (seed, position, token), and ties go
    to the lowest token id, as ``torch.argmax`` does.
    """
    import torch

    n, m = logprobs.shape
    live = logprobs > float("-inf")  # NaN is not live either: rows with one go the dense way
    count = int(live.sum())
    if count >= SPARSE_SHARE * n * m or bool(torch.isnan(logprobs).any()):
        return None
    rows, cols = live.nonzero(as_tuple=True)
    x = _gumbel(_column_hash(_row_hash(seed, positions)[rows], cols), logprobs[rows, cols])
    best = torch.full((n,), float("-inf"), dtype=x.dtype).scatter_reduce(0, rows, x, "amax")
    top = x == best[rows]
    first = torch.full((n,), m, dtype=torch.int64).scatter_reduce(0, rows[top], cols[top], "amin")
    first[first == m] = 0  # a row with nothing to draw: argmax of its all -inf noise is token 0
    return first.view(-1, 1)


def murmur_hash32_cpu_aware(original, seed, positions, col_indices):
    """AROUND hook: CPU tensors take the torch twin, everything else SGLang's kernel."""
    if seed.device.type == "cpu":
        return murmur_hash32_torch(seed, positions, col_indices)
    return original(seed, positions, col_indices)


def eager_on_cpu(original, logprobs, seed, positions):
    """AROUND hook: on CPU, run SGLang's seeded draw (``multinomial_with_seed``) eagerly, and over
    each row's drawable tokens only where those are few (:func:`seeded_draw_sparse`).

    It is ``torch.compile``'d, and its first call compiles: on the 2-core CPU machine one forward step
    of a fresh instance took 14.2 s longer than its peers, inside the first rollout a trainer sends. The
    function is a few elementwise float64 ops and an argmax, which need no compiler on CPU.
    """
    if logprobs.device.type == "cpu":
        sparse = seeded_draw_sparse(logprobs, seed, positions)
        if sparse is not None:
            return sparse
        return getattr(original, "__wrapped__", original)(logprobs, seed, positions)
    return original(logprobs, seed, positions)


def filtered_probs(probs, top_ks, top_ps):
    """``probs`` with each row's top-k / top-p cut applied as SGLang's torch sampler cuts it (its sort,
    its cumulative sum), in token order; rows with neither cut are left as they are, bit for bit."""
    import torch

    vocab = probs.shape[-1]
    cut = (top_ks < vocab) | (top_ps < 1.0)
    if not bool(cut.any()):
        return probs
    rows = cut.nonzero(as_tuple=True)[0]
    sub = probs[rows]
    probs_sort, probs_idx = sub.sort(dim=-1, descending=True)
    probs_sum = torch.cumsum(probs_sort, dim=-1)
    probs_sort[torch.arange(vocab, device=probs.device).view(1, -1) >= top_ks[rows].view(-1, 1)] = 0.0
    probs_sort[(probs_sum - probs_sort) > top_ps[rows].view(-1, 1)] = 0.0
    out = probs.clone()
    out[rows] = torch.zeros_like(sub).scatter_(1, probs_idx, probs_sort)
    return out


def token_keyed_draw(original, probs, top_ks, top_ps, min_ps, need_min_p_sampling, sampling_seed, positions,
                     *args, return_filtered_probs: bool = False, **kwargs):
    """AROUND hook on SGLang's top-k / top-p sampler: seeded draws keyed by token id, as in its plain
    path, so a request draws the same token whatever else is in its batch.

    SGLang's seeded path takes the Gumbel noise of each column of the *sorted* probabilities: a row's
    noise then follows its tokens' ranks, and the path is chosen for the whole batch (any row with a
    top-k, a greedy one included, sends every row through it). A temperature-1 sample in a batch with
    a greedy request drew other tokens than alone, so chunking and moving changed what it sampled.
    Here every row draws ``argmax(log p_filtered(token) + gumbel(seed, position, token))``: its cut
    applied in token order, the same noise as the plain path, and a row without a cut takes exactly
    the plain path's draw. Each draw is still an exact sample of the row's filtered distribution.

    With ``return_filtered_probs`` (a request asked for its sampling support, ``return_sampling_mask``)
    it also returns what SGLang's path returns: the filtered weights in descending order of
    probability, their token ids, and each drawn token's weight.
    """
    import torch
    from sglang.srt.layers import sampler

    if sampling_seed is None or need_min_p_sampling:
        return original(probs, top_ks, top_ps, min_ps, need_min_p_sampling, sampling_seed, positions, *args,
                        return_filtered_probs=return_filtered_probs, **kwargs)
    kept = filtered_probs(probs, top_ks, top_ps)
    ids = sampler.multinomial_with_seed(torch.log(kept), sampling_seed, positions).view(-1)
    if not return_filtered_probs:
        return ids.to(torch.int32)
    order = probs.sort(dim=-1, descending=True).indices
    return (ids.to(torch.int32), kept.gather(1, order), order.to(torch.int32),
            kept.gather(1, ids.long().view(-1, 1)).view(-1))


def register_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, seed_every_request, HookType.AFTER)
    HookRegistry.register("sglang.srt.layers.sampler.multinomial_with_seed", eager_on_cpu, HookType.AROUND)
    HookRegistry.register("sglang.srt.layers.sampler.top_k_top_p_min_p_sampling_from_probs_torch",
                          token_keyed_draw, HookType.AROUND)
    HookRegistry.register("sglang.kernels.ops.sampling.murmur_hash.murmur_hash32", murmur_hash32_cpu_aware,
                          HookType.AROUND)
