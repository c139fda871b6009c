"""Torch reference for tree-verify attention, and the contract the fast paths share.

The verifier runs the T = N + 1 tree tokens of each request as queries against three kinds of KV:
the group's shared prompt prefix, the request's own generated tokens, and the draft tree itself,
where node i sees node j iff j is i or an ancestor of i. Shared KV is passed as ``KVLevel`` segments
so that the fast paths can read one group's prefix once for all its requests. LSE is in natural log
everywhere in this package; FlashInfer's base-2 LSE is converted at its boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class KVLevel:
    """KV read by consecutive requests: segment s covers requests ``req_indptr[s]:req_indptr[s+1]``
    and keys ``kv_indptr[s]:kv_indptr[s+1]`` of ``k`` / ``v`` ([num_keys, num_kv_heads, head_dim]).
    Segments cover every request of the batch in order (``req_indptr`` runs from 0 to B); a
    segment may have no keys."""

    k: torch.Tensor
    v: torch.Tensor
    req_indptr: torch.Tensor  # [S + 1]
    kv_indptr: torch.Tensor  # [S + 1]

    @classmethod
    def per_request(cls, k: torch.Tensor, v: torch.Tensor, kv_indptr: torch.Tensor) -> "KVLevel":
        """One segment per request (its own KV)."""
        n = kv_indptr.numel()
        return cls(k, v, torch.arange(n, device=kv_indptr.device), kv_indptr)


def tree_mask_from_parents(parents: torch.Tensor) -> torch.Tensor:
    """[B, T] parents (root -1) -> [B, T, T] bool: node i sees node j iff j is i or an ancestor."""
    b, t = parents.shape
    mask = torch.eye(t, dtype=torch.bool, device=parents.device).expand(b, t, t).clone()
    cur = parents.long()
    rows = torch.arange(t, device=parents.device).expand(b, t)
    for _ in range(t):
        hit = cur >= 0
        mask[torch.arange(b, device=parents.device)[:, None].expand(b, t)[hit], rows[hit], cur[hit]] = True
        cur = torch.where(hit, parents.long().gather(1, cur.clamp(min=0)), -1)
    return mask


def _expand_heads(x: torch.Tensor, num_q_heads: int) -> torch.Tensor:
    return x.repeat_interleave(num_q_heads // x.shape[1], dim=1)


def attention_with_lse_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float,
                           mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [Tq, Hq, D], k / v [L, Hk, D] (GQA: Hq a multiple of Hk), mask [Tq, L] bool (True = visible).
    Returns (o [Tq, Hq, D] float32, lse [Tq, Hq] float32, natural log); a row that sees no key gets
    o = 0 and lse = -inf, the identity of ``merge_states_ref``."""
    hq = q.shape[1]
    kk = _expand_heads(k.double(), hq)
    vv = _expand_heads(v.double(), hq)
    s = torch.einsum("qhd,khd->hqk", q.double(), kk) * sm_scale
    if mask is not None:
        s = s.masked_fill(~mask.bool()[None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [H, Tq]
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    o = torch.einsum("hqk,khd->qhd", p, vv)
    return o.float(), lse.transpose(0, 1).float()


def merge_states_ref(o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor,
                     lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over the union of two key sets from the parts: weights exp(lse_x - lse)."""
    lse = torch.logaddexp(lse_a.float(), lse_b.float())
    safe = torch.where(torch.isfinite(lse), lse, 0.0)
    wa = torch.exp(lse_a.float() - safe)[..., None]
    wb = torch.exp(lse_b.float() - safe)[..., None]
    return wa * o_a.float() + wb * o_b.float(), lse


def ragged_attention_with_lse_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qo_indptr: torch.Tensor,
                                  kv_indptr: torch.Tensor, sm_scale: float, mask: torch.Tensor | None = None,
                                  mask_indptr: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Segment s: queries qo_indptr[s]:qo_indptr[s+1] against keys kv_indptr[s]:kv_indptr[s+1]; the
    optional flat mask holds each segment's [q_len, kv_len] block row-major from mask_indptr[s]
    (FlashInfer's ``custom_mask`` layout)."""
    o = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=torch.float32, device=q.device)
    lse = torch.full(q.shape[:2], float("-inf"), dtype=torch.float32, device=q.device)
    for s in range(qo_indptr.numel() - 1):
        q0, q1, k0, k1 = (int(x) for x in (qo_indptr[s], qo_indptr[s + 1], kv_indptr[s], kv_indptr[s + 1]))
        seg_mask = None
        if mask is not None:
            m0 = int(mask_indptr[s])
            seg_mask = mask[m0:m0 + (q1 - q0) * (k1 - k0)].view(q1 - q0, k1 - k0)
        o[q0:q1], lse[q0:q1] = attention_with_lse_ref(q[q0:q1], k[k0:k1], v[k0:k1], sm_scale, seg_mask)
    return o, lse


def tree_verify_attention_ref(q: torch.Tensor, levels: Sequence[KVLevel], k_tree: torch.Tensor,
                              v_tree: torch.Tensor, tree_mask: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """Exact attention over the concatenation [shared levels..., tree] for every request.

    q [B, T, Hq, D]; k_tree / v_tree [B, T, Hk, D]; tree_mask [B, T, T] bool. Returns o [B, T, Hq, D]
    in float32. The fast paths (``seer_sglang.kernels.tree_attention``, ``seer_sglang.kernels.cascade``) keep
    this contract and return q's dtype."""
    b = q.shape[0]
    out = torch.empty(q.shape[:3] + (v_tree.shape[-1],), dtype=torch.float32, device=q.device)
    for r in range(b):
        ks, vs, ms = [], [], []
        for lvl in levels:
            s = int(torch.searchsorted(lvl.req_indptr, torch.tensor(r, device=lvl.req_indptr.device),
                                       right=True)) - 1
            k0, k1 = int(lvl.kv_indptr[s]), int(lvl.kv_indptr[s + 1])
            ks.append(lvl.k[k0:k1])
            vs.append(lvl.v[k0:k1])
            ms.append(torch.ones(q.shape[1], k1 - k0, dtype=torch.bool, device=q.device))
        ks.append(k_tree[r])
        vs.append(v_tree[r])
        ms.append(tree_mask[r].bool())
        out[r] = attention_with_lse_ref(q[r], torch.cat(ks), torch.cat(vs), sm_scale, torch.cat(ms, dim=1))[0]
    return out


def tree_verify_attention_levels_ref(q: torch.Tensor, levels: Sequence[KVLevel], k_tree: torch.Tensor,
                                     v_tree: torch.Tensor, tree_mask: torch.Tensor,
                                     sm_scale: float) -> torch.Tensor:
    """Same result as ``tree_verify_attention_ref``, computed the way the fast paths do: one
    attention per level (shared segments read once per group), merged by LSE."""
    b, t, hq, _ = q.shape
    flat_q = q.reshape(b * t, hq, -1)
    rows = torch.arange(b + 1, device=q.device) * t
    o, lse = ragged_attention_with_lse_ref(
        flat_q, k_tree.reshape(b * t, *k_tree.shape[2:]), v_tree.reshape(b * t, *v_tree.shape[2:]),
        rows, rows, sm_scale, tree_mask.reshape(-1), torch.arange(b, device=q.device) * t * t)
    for lvl in levels:
        o_l, lse_l = ragged_attention_with_lse_ref(flat_q, lvl.k, lvl.v, lvl.req_indptr * t, lvl.kv_indptr, sm_scale)
        o, lse = merge_states_ref(o, lse, o_l, lse_l)
    return o.view(b, t, hq, -1)


def default_sm_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
