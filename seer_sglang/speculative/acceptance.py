"""Lossless acceptance of draft token trees, batched over requests and vectorized in torch.

A verify batch holds B draft trees of M = N + 1 nodes. Node 0 is the root (the last verified token).
``parents[b, i]`` is node i's parent (the root's is -1; a negative parent on a node i > 0 marks
padding). ``target_logits[b, i]`` is the target model's next-token distribution after node i.
Children are tried in index order, the sibling order of SGLang's verify kernels.

Greedy (temperature 0) accepts a child whose token is the target argmax, so the emitted tokens are
exactly those of plain greedy decoding. Sampling uses the multi-candidate rejection rule for a
deterministic draft (a point mass q): at a node with target distribution p, one coin u picks the
first child i with u < p(x_1) + ... + p(x_i); if none is picked, the bonus token is drawn from p with
the children's tokens removed. Each child is thus accepted with probability p(x_i) and every other
token comes out with probability p(y): the output distribution is exactly the target's. Repeated
sibling tokens would be counted twice, so only the first of them is kept.

Nothing loops over requests or tokens: the tree is resolved by pointer doubling, so the only Python
loop is ceil(log2(M)) rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

SAMPLING_EPS = 1e-6  # SGLang treats temperature below this as greedy (top_k = 1, temperature 1)


@dataclass
class AcceptResult:
    """Outcome of one verify step. W = max depth + 1 columns; entries past each request's end are -1 / 0.

    Column d of ``tokens`` is drawn from the target distribution at node ``path[:, d]``; the
    logprob columns score that token there.
    """

    tokens: torch.Tensor  # [B, W] accepted draft tokens, then the bonus token
    num_accepted: torch.Tensor  # [B] accepted draft tokens (tokens emitted = num_accepted + 1)
    path: torch.Tensor  # [B, W] node indices from the root (path[:, 0] == 0)
    logprobs: torch.Tensor  # [B, W] what SGLang returns: log_softmax(logits / temperature)
    raw_logprobs: torch.Tensor  # [B, W] log_softmax(logits) (SGLANG_RETURN_ORIGINAL_LOGPROB)
    processed_logprobs: torch.Tensor  # [B, W] log of the distribution actually sampled (top-k/top-p)

    @property
    def accept_lens(self) -> torch.Tensor:
        """Tokens emitted per request, bonus included (SGLang's ``accept_lens``)."""
        return self.num_accepted + 1


def pack_drafts(roots: Sequence[int], drafts: Sequence, num_nodes: int | None = None,
                device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(draft_tokens, parents) [B, M] from per-request drafts with ``.tokens`` and ``.parents``
    (draft-local indices, -1 = child of the root): tree node i + 1 is draft token i. Shorter drafts
    are padded; M defaults to the longest draft plus the root."""
    m = num_nodes or 1 + max((len(d.tokens) for d in drafts), default=0)
    tokens = torch.zeros(len(roots), m, dtype=torch.long)
    parents = torch.full((len(roots), m), -1, dtype=torch.long)
    for r, (root, d) in enumerate(zip(roots, drafts)):
        n = len(d.tokens)
        tokens[r, 0] = root
        tokens[r, 1:n + 1] = torch.as_tensor(list(d.tokens), dtype=torch.long)
        parents[r, 1:n + 1] = torch.as_tensor(list(d.parents), dtype=torch.long) + 1
    return tokens.to(device), parents.to(device)


def _rounds(m: int) -> int:
    """Pointer-doubling rounds that cover any path in a tree of m nodes."""
    return max(1, (m - 1).bit_length())


def tree_structure(parents: torch.Tensor, max_depth: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(valid [B, M] bool, depth [B, M] long). Invalid: padding, nodes under padding or in a cycle,
    nodes deeper than ``max_depth``. The root is always valid with depth 0."""
    _, m = parents.shape
    idx = torch.arange(m, device=parents.device)
    par = parents.long()
    is_child = (par >= 0) & (par < m) & (idx > 0)
    jump = torch.where(is_child, par, 0)
    valid = is_child.clone()
    valid[:, 0] = True
    depth = is_child.long()
    for _ in range(_rounds(m)):
        valid = valid & valid.gather(1, jump)
        depth = depth + depth.gather(1, jump)
        jump = jump.gather(1, jump)
    valid &= jump == 0  # a node in a cycle never reaches the root
    if max_depth is not None:
        valid &= depth <= max_depth
    return valid, depth


@dataclass
class _Walk:
    path: torch.Tensor  # [B, W]
    last: torch.Tensor  # [B] deepest accepted node
    num_accepted: torch.Tensor  # [B]
    children_of_last: torch.Tensor  # [B, M] bool: the rejected children of ``last``


def _walk(tokens: torch.Tensor, parents: torch.Tensor, q: torch.Tensor, coins: torch.Tensor,
          max_depth: int | None, threshold_single: float = 1.0, threshold_acc: float = 1.0) -> _Walk:
    """Accept down the tree. ``q[b, i]``: target probability of node i's token at its parent;
    ``coins[b, p]``: the coin used among p's children (SGLang indexes coins by the parent node)."""
    b, m = tokens.shape
    device = tokens.device
    idx = torch.arange(m, device=device)
    valid, depth = tree_structure(parents, max_depth)
    par = parents.long().clamp(min=0)
    child = valid & (idx > 0)

    same_parent = (par[:, :, None] == par[:, None, :]) & child[:, :, None] & child[:, None, :]
    earlier = torch.ones(m, m, dtype=torch.bool, device=device).tril(-1)  # [i, j]: j < i
    earlier_sib = same_parent & earlier
    upto_sib = same_parent & (earlier | torch.eye(m, dtype=torch.bool, device=device))
    dup = ((tokens[:, :, None] == tokens[:, None, :]) & earlier_sib).any(-1)
    q = torch.where(child & ~dup, q.float(), 0.0)

    cum = torch.bmm(upto_sib.float(), q.unsqueeze(-1)).squeeze(-1)  # mass of siblings tried so far
    u = coins.float().gather(1, par)
    cond = child & (q > 0) & ((u < cum / threshold_acc) | (q >= threshold_single))
    picked_before = torch.bmm(earlier_sib.float(), cond.float().unsqueeze(-1)).squeeze(-1) > 0
    ok = cond & ~picked_before
    ok[:, 0] = True

    jump = torch.where(child, par, 0)
    for _ in range(_rounds(m)):  # on the path iff every ancestor was picked too
        ok = ok & ok.gather(1, jump)
        jump = jump.gather(1, jump)

    last = torch.where(ok, depth, -1).argmax(1)
    num_accepted = depth.gather(1, last[:, None]).squeeze(1)
    width = (max_depth if max_depth is not None else m - 1) + 1
    col = torch.where(ok & (depth < width), depth, width)
    path = torch.full((b, width + 1), -1, dtype=torch.long, device=device)
    path.scatter_(1, col, idx.expand(b, m).contiguous())  # one accepted node per depth
    children_of_last = child & (par == last[:, None])
    return _Walk(path[:, :width], last, num_accepted, children_of_last)


def _sample_inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index i with cdf[i-1] <= u * total < cdf[i]; never a zero-weight index (the last positive
    one if rounding runs past the end)."""
    v = weights.shape[-1]
    cdf = weights.cumsum(-1)
    idx = (cdf <= (u.float() * cdf[:, -1])[:, None]).sum(-1)
    arange = torch.arange(v, device=weights.device)
    last_pos = torch.where(weights > 0, arange, -1).max(-1).values
    idx = torch.where(idx >= v, last_pos, idx)
    return torch.where(idx < 0, v - 1, idx)


def _bonus(probs: torch.Tensor, tokens: torch.Tensor, walk: _Walk, final_coins: torch.Tensor,
           draft_probs: torch.Tensor | None = None, draft_off: torch.Tensor | None = None) -> torch.Tensor:
    """Draw the token after the last accepted node from the residual: the target's distribution
    there without the rejected children (minus ``draft_probs`` where given, as SGLang's kernel does)."""
    b, _, v = probs.shape
    rows = walk.last.view(b, 1, 1).expand(b, 1, v)
    p_last = probs.gather(1, rows).squeeze(1).float()
    drop = torch.zeros(b, v + 1, dtype=torch.bool, device=probs.device)
    drop.scatter_(1, torch.where(walk.children_of_last, tokens.long().clamp(min=0), v), True)
    drop = drop[:, :v]
    if draft_probs is None:
        resid = p_last.masked_fill(drop, 0.0)
    else:
        d = torch.where(drop, p_last, draft_probs.gather(1, rows).squeeze(1).float())
        if draft_off is not None:
            d = d.masked_fill(draft_off[:, None], 0.0)
        resid = (p_last - d).clamp(min=0.0)
    resid = torch.where(resid.sum(-1, keepdim=True) > 0, resid, p_last)
    return _sample_inverse_cdf(resid, final_coins)


def _emitted(tokens: torch.Tensor, walk: _Walk, bonus: torch.Tensor) -> torch.Tensor:
    b, w = walk.path.shape
    nxt = tokens.long().gather(1, walk.path[:, 1:].clamp(min=0))
    nxt = torch.cat([nxt, nxt.new_full((b, 1), -1)], 1)
    pos = torch.arange(w, device=tokens.device)
    end = walk.num_accepted[:, None]
    return torch.where(pos < end, nxt, torch.where(pos == end, bonus.long()[:, None], -1))


def _at(t: torch.Tensor, path: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """t[b, path[b, d], out[b, d]] for [B, M, V] or [B, M] tensors (no [B, W, V] copy)."""
    if t.dim() == 2:
        return t.gather(1, path.clamp(min=0))
    b, m, v = t.shape
    return t.reshape(b, m * v).gather(1, path.clamp(min=0) * v + out.clamp(min=0))


def _logprobs(logits: torch.Tensor, path: torch.Tensor, out: torch.Tensor, num_accepted: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits) at each emitted token, clamped as SGLang does; 0 past the end."""
    logits = logits.float()
    lp = _at(logits, path, out) - _at(torch.logsumexp(logits, dim=-1), path, out)
    return _mask_tail(lp.clamp(min=torch.finfo(lp.dtype).min), num_accepted)


def _mask_tail(x: torch.Tensor, num_accepted: torch.Tensor) -> torch.Tensor:
    pos = torch.arange(x.shape[1], device=x.device)
    return torch.where(pos <= num_accepted[:, None], x, 0.0)


def _per_request(x, b: int, dtype: torch.dtype, device, default) -> torch.Tensor:
    if x is None:
        x = default
    if not isinstance(x, torch.Tensor):
        return torch.full((b,), x, dtype=dtype, device=device)
    x = x.to(device=device, dtype=dtype).reshape(-1)  # SGLang keeps [B, 1] columns
    return x.expand(b) if x.numel() == 1 else x


def _sampling_params(logits: torch.Tensor, temperature, top_k, top_p, min_p):
    """Per-request (temperature, top_k, top_p, min_p) the way SGLang normalizes them: temperature
    below 1e-6 means greedy, i.e. top_k = 1 at temperature 1; top_k <= 0 means the whole vocabulary."""
    b, v, dev = logits.shape[0], logits.shape[-1], logits.device
    t = _per_request(temperature, b, torch.float32, dev, 1.0)
    greedy = t < SAMPLING_EPS
    t = torch.where(greedy, 1.0, t)
    k = _per_request(top_k, b, torch.long, dev, 0)
    k = torch.where((k <= 0) | (k > v), v, k)
    k = torch.where(greedy, 1, k)
    p = _per_request(top_p, b, torch.float32, dev, 1.0)
    mp = _per_request(min_p, b, torch.float32, dev, 0.0)
    return t, k, p, mp


def _bcast(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return x.view(-1, *([1] * (like.dim() - 1)))


def process_probs(logits: torch.Tensor, temperature=1.0, top_k=None, top_p=None, min_p=None) -> torch.Tensor:
    """Target probabilities after temperature, top-k, top-p and min-p, as SGLang's sampler filters
    them (torch backend): softmax(logits / T), then keep token i iff its rank < k and the mass of
    more likely tokens <= top_p (both on the unfiltered probs, FlashInfer's "joint" order), then
    drop tokens below min_p * max, then renormalize. Parameters are scalars or per-request [B]."""
    t, k, p, mp = _sampling_params(logits, temperature, top_k, top_p, min_p)
    return _filtered_softmax(logits.float() / _bcast(t, logits), k, p, mp)


def _filtered_softmax(scaled: torch.Tensor, k: torch.Tensor, p: torch.Tensor, mp: torch.Tensor) -> torch.Tensor:
    probs = torch.softmax(scaled, dim=-1)
    v = scaled.shape[-1]
    if bool((k >= v).all()) and bool((p >= 1.0).all()) and bool((mp <= 0.0).all()):
        return probs
    k, p, mp = _bcast(k, probs), _bcast(p, probs), _bcast(mp, probs)
    width = min(v, max(256, int(k[k < v].max()) if bool((k < v).any()) else 0))
    while True:  # the most likely `width` tokens, widened until every token past them is dropped anyway
        srt, order = probs.topk(width, dim=-1, sorted=True)
        enough = (width >= k) | (srt.sum(-1, keepdim=True) > p) | (srt[..., -1:] < srt[..., :1] * mp)
        if width == v or bool(enough.all()):
            break
        width = min(v, width * 4)
    rank = torch.arange(width, device=scaled.device)
    keep = (rank < k) & ((srt.cumsum(-1) - srt) <= p) & (srt >= srt[..., :1] * mp)
    out = torch.zeros_like(probs).scatter_(-1, order, srt * keep)
    return out / out.sum(-1, keepdim=True)


def _target_q(probs: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
    """probs[b, parent(i), token(i)] without materializing per-node rows."""
    b, m, v = probs.shape
    flat = parents.long().clamp(min=0) * v + tokens.long().clamp(min=0, max=v - 1)
    return probs.reshape(b, m * v).gather(1, flat)


def greedy_accept(draft_tokens: torch.Tensor, parents: torch.Tensor, target_logits: torch.Tensor,
                  *, max_depth: int | None = None) -> AcceptResult:
    """Temperature 0: follow the child equal to the target argmax; the bonus is the argmax after it."""
    b, m, _ = target_logits.shape
    pred = target_logits.argmax(-1)
    q = (draft_tokens.long() == pred.gather(1, parents.long().clamp(min=0))).float()
    walk = _walk(draft_tokens, parents, q, torch.zeros(b, m, device=q.device), max_depth)
    out = _emitted(draft_tokens, walk, pred.gather(1, walk.last[:, None]).squeeze(1))
    lp = _logprobs(target_logits, walk.path, out, walk.num_accepted)
    return AcceptResult(out, walk.num_accepted, walk.path, lp, lp, torch.zeros_like(lp))


def sample_accept(draft_tokens: torch.Tensor, parents: torch.Tensor, target_logits: torch.Tensor,
                  temperature=1.0, top_k=None, top_p=None, min_p=None, *,
                  coins: torch.Tensor | None = None, final_coins: torch.Tensor | None = None,
                  generator: torch.Generator | None = None, max_depth: int | None = None) -> AcceptResult:
    """Temperature > 0 (per request; rows below 1e-6 are greedy): tree rejection sampling on the
    processed target probabilities. ``coins [B, M]`` (coin for the children of node p at column p)
    and ``final_coins [B]`` are uniform in [0, 1); drawn from ``generator`` when not given."""
    b, m, _ = target_logits.shape
    dev = target_logits.device
    if coins is None:
        coins = torch.rand(b, m, device=dev, generator=generator)
    if final_coins is None:
        final_coins = torch.rand(b, device=dev, generator=generator)
    t, k, p, mp = _sampling_params(target_logits, temperature, top_k, top_p, min_p)
    scaled = target_logits.float() / t.view(b, 1, 1)
    probs = _filtered_softmax(scaled, k, p, mp)
    walk = _walk(draft_tokens, parents, _target_q(probs, draft_tokens, parents), coins, max_depth)
    out = _emitted(draft_tokens, walk, _bonus(probs, draft_tokens, walk, final_coins))

    logprobs = _logprobs(scaled, walk.path, out, walk.num_accepted)
    raw = logprobs if bool((t == 1.0).all()) else _logprobs(target_logits, walk.path, out, walk.num_accepted)
    processed = _mask_tail(torch.log(_at(probs, walk.path, out)), walk.num_accepted)
    return AcceptResult(out, walk.num_accepted, walk.path, logprobs, raw, processed)


# --- SGLang verify-op layout: retrive_index / retrive_next_token / retrive_next_sibling -------------

def retrive_from_parents(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(retrive_index, retrive_next_token, retrive_next_sibling) as SGLang builds them: flat index
    b * M + i, each node's first child, and its next sibling, children in index order."""
    b, m = parents.shape
    dev = parents.device
    idx = torch.arange(m, device=dev)
    valid, _ = tree_structure(parents)
    child = valid & (idx > 0)
    par = parents.long().clamp(min=0)
    child_of = child[:, None, :] & (par[:, None, :] == idx[None, :, None])  # [b, p, i]
    first = torch.where(child_of, idx, m).min(-1).values
    later_sib = (child[:, :, None] & child[:, None, :] & (par[:, :, None] == par[:, None, :])
                 & (idx[None, None, :] > idx[None, :, None]))  # [b, i, j]: j is a later sibling of i
    nxt = torch.where(later_sib, idx, m).min(-1).values
    retrive_index = torch.arange(b, device=dev)[:, None] * m + idx
    return retrive_index, torch.where(first < m, first, -1), torch.where(nxt < m, nxt, -1)


def parents_from_retrive(retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor) -> torch.Tensor:
    """Inverse of the link layout: parents [B, N] (root and unreachable nodes -1)."""
    b, n = retrive_next_token.shape
    dev = retrive_next_token.device
    idx = torch.arange(n, device=dev).expand(b, n)
    up = torch.full((b, n + 1), -1, dtype=torch.long, device=dev)  # up[c] = p if c is p's first child
    up.scatter_(1, torch.where(retrive_next_token >= 0, retrive_next_token.long(), n), idx)
    left = torch.full((b, n + 1), -1, dtype=torch.long, device=dev)  # left[s] = previous sibling
    left.scatter_(1, torch.where(retrive_next_sibling >= 0, retrive_next_sibling.long(), n), idx)
    head = torch.where(left[:, :n] >= 0, left[:, :n], idx)
    for _ in range(_rounds(n)):  # walk left to the first sibling
        head = head.gather(1, head)
    parents = up[:, :n].gather(1, head)
    parents[:, 0] = -1
    return parents


def _write_outputs(predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
                   retrive_index: torch.Tensor, walk: _Walk, out: torch.Tensor) -> None:
    pos = torch.arange(walk.path.shape[1], device=out.device)
    used = pos <= walk.num_accepted[:, None]
    flat = retrive_index.long().gather(1, walk.path.clamp(min=0))
    accept_index.copy_(torch.where(used, flat.to(accept_index.dtype), accept_index))
    accept_token_num.copy_(walk.num_accepted.to(accept_token_num.dtype))
    predicts.view(-1)[flat[used]] = out[used].to(predicts.dtype)


def verify_tree_greedy_torch(predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
                             candidates: torch.Tensor, retrive_index: torch.Tensor,
                             retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
                             target_predict: torch.Tensor) -> None:
    """Torch twin of sgl_kernel's ``verify_tree_greedy`` (same arguments, same in-place outputs)."""
    b, n = candidates.shape
    parents = parents_from_retrive(retrive_next_token, retrive_next_sibling)
    pred = target_predict.reshape(-1)[retrive_index.reshape(-1).long()].view(b, n).long()
    q = (candidates.long() == pred.gather(1, parents.clamp(min=0))).float()
    walk = _walk(candidates, parents, q, torch.zeros(b, n, device=q.device), accept_index.shape[1] - 1)
    out = _emitted(candidates, walk, pred.gather(1, walk.last[:, None]).squeeze(1))
    _write_outputs(predicts, accept_index, accept_token_num, retrive_index, walk, out)


def tree_speculative_sampling_target_only_torch(
        predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
        candidates: torch.Tensor, retrive_index: torch.Tensor, retrive_next_token: torch.Tensor,
        retrive_next_sibling: torch.Tensor, uniform_samples: torch.Tensor,
        uniform_samples_for_final_sampling: torch.Tensor, target_probs: torch.Tensor,
        draft_probs: torch.Tensor, threshold_single: float = 1.0, threshold_acc: float = 1.0,
        deterministic: bool = True) -> None:
    """Torch twin of SGLang's ``tree_speculative_sampling_target_only`` (same arguments, same in-place
    outputs, same coin use). ``draft_probs`` is read, not written. Differs from the CUDA kernel only
    on repeated sibling tokens, where it stays lossless. Lossless iff both thresholds are 1."""
    del deterministic  # torch reductions here are already run-to-run deterministic
    s = accept_index.shape[1]
    parents = parents_from_retrive(retrive_next_token, retrive_next_sibling)
    q = _target_q(target_probs, candidates, parents)
    walk = _walk(candidates, parents, q, uniform_samples, s - 1, threshold_single, max(threshold_acc, 1e-9))
    bonus = _bonus(target_probs, candidates, walk, uniform_samples_for_final_sampling,
                   draft_probs=draft_probs, draft_off=walk.num_accepted == s - 1)
    out = _emitted(candidates, walk, bonus)
    _write_outputs(predicts, accept_index, accept_token_num, retrive_index, walk, out)
