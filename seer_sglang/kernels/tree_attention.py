"""Triton tree-verify attention: one kernel per KV level returning (o, lse), and an LSE merge.

A level is ragged: query segment s (rows qo_indptr[s]:qo_indptr[s+1]) attends keys
kv_indptr[s]:kv_indptr[s+1], optionally under a flat per-segment mask (FlashInfer's
``custom_mask`` layout). A shared prefix is one segment holding all of its group's queries, so its
keys are read once per query block rather than once per request. LSE is natural log.

Runs on GPU, or on CPU tensors under ``TRITON_INTERPRET=1`` (set before triton is imported). Plain
pointer arithmetic and no autotune, so both modes take the same code.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import triton
import triton.language as tl

from .reference import KVLevel

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@triton.jit
def _level_attn_kernel(Q, K, V, O, LSE, MASK, qo_indptr, kv_indptr, mask_indptr, qk_scale_log2,
                       stride_qn, stride_qh, stride_kn, stride_kh, stride_vn, stride_vh,
                       stride_on, stride_oh, num_heads,
                       GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, HAS_MASK: tl.constexpr,
                       UPCAST: tl.constexpr):
    """One program: BLOCK_M rows of (query token, query head of this KV head) against one segment.
    Packing a KV head's GQA group into the rows reads each key block once for the whole group."""
    seg = tl.program_id(0)
    mblk = tl.program_id(1)
    kvh = tl.program_id(2)
    q_start = tl.load(qo_indptr + seg)
    q_len = tl.load(qo_indptr + seg + 1) - q_start
    kv_start = tl.load(kv_indptr + seg)
    kv_len = tl.load(kv_indptr + seg + 1) - kv_start
    if mblk * BLOCK_M < q_len * GROUP:
        offs_m = mblk * BLOCK_M + tl.arange(0, BLOCK_M)
        tok = offs_m // GROUP
        head = kvh * GROUP + offs_m % GROUP
        offs_d = tl.arange(0, BLOCK_D)
        m_ok = tok < q_len
        d_ok = offs_d < HEAD_DIM
        q = tl.load(Q + (q_start + tok)[:, None] * stride_qn + head[:, None] * stride_qh + offs_d[None, :],
                    mask=m_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        mask_start = 0
        if HAS_MASK:
            mask_start = tl.load(mask_indptr + seg)

        m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)  # finite: a fully masked block leaves it as is
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for start in range(0, kv_len, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            n_ok = offs_n < kv_len
            kv_rows = (kv_start + offs_n)[:, None]
            k = tl.load(K + kv_rows * stride_kn + kvh * stride_kh + offs_d[None, :],
                        mask=n_ok[:, None] & d_ok[None, :], other=0.0)
            v = tl.load(V + kv_rows * stride_vn + kvh * stride_vh + offs_d[None, :],
                        mask=n_ok[:, None] & d_ok[None, :], other=0.0)
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale_log2
            ok = m_ok[:, None] & n_ok[None, :]
            if HAS_MASK:
                bits = tl.load(MASK + mask_start + tok[:, None] * kv_len + offs_n[None, :], mask=ok, other=0)
                ok = ok & (bits != 0)
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
            m_i = m_new

        seen = l_i > 0
        o = tl.where(seen[:, None], acc / tl.where(seen, l_i, 1.0)[:, None], 0.0)
        lse = tl.where(seen, (m_i + tl.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453, float("-inf"))
        rows = q_start + tok
        tl.store(O + rows[:, None] * stride_on + head[:, None] * stride_oh + offs_d[None, :],
                 o.to(O.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])
        tl.store(LSE + rows * num_heads + head, lse, mask=m_ok)


@triton.jit
def _merge_kernel(OA, LA, OB, LB, O, L, num_rows, HEAD_DIM: tl.constexpr, BLOCK_R: tl.constexpr,
                  BLOCK_D: tl.constexpr):
    """Rows are (token, head) pairs of contiguous [N, H, D] outputs and [N, H] LSE."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = rows < num_rows
    la = tl.load(LA + rows, mask=r_ok, other=float("-inf"))
    lb = tl.load(LB + rows, mask=r_ok, other=float("-inf"))
    m = tl.maximum(la, lb)
    m = tl.where(m == float("-inf"), 0.0, m)
    wa = tl.exp(la - m)
    wb = tl.exp(lb - m)
    total = wa + wb
    seen = total > 0
    inv = 1.0 / tl.where(seen, total, 1.0)
    offs = tl.arange(0, BLOCK_D)
    ok = r_ok[:, None] & (offs < HEAD_DIM)[None, :]
    base = rows[:, None] * HEAD_DIM + offs[None, :]
    oa = tl.load(OA + base, mask=ok, other=0.0).to(tl.float32)
    ob = tl.load(OB + base, mask=ok, other=0.0).to(tl.float32)
    o = tl.where(seen[:, None], oa * (wa * inv)[:, None] + ob * (wb * inv)[:, None], 0.0)
    tl.store(O + base, o.to(O.dtype.element_ty), mask=ok)
    tl.store(L + rows, tl.where(seen, m + tl.log(tl.where(seen, total, 1.0)), float("-inf")), mask=r_ok)


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


def attention_level(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, qo_indptr: torch.Tensor,
                    kv_indptr: torch.Tensor, sm_scale: float, mask: torch.Tensor | None = None,
                    mask_indptr: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
                    block_m: int = 16, block_n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged attention of one level: q [Nq, Hq, D], k / v [Nk, Hk, D]; returns (o in ``out_dtype``,
    default q's, lse [Nq, Hq] float32, natural log). Rows outside every segment or seeing no key:
    o 0, lse -inf."""
    nq, hq, d = q.shape
    hk = k.shape[1]
    assert hq % hk == 0, "num_q_heads must be a multiple of num_kv_heads"
    assert k.stride(-1) == 1 and v.stride(-1) == 1 and q.stride(-1) == 1
    o = torch.zeros(nq, hq, v.shape[-1], dtype=out_dtype or q.dtype, device=q.device)
    lse = torch.full((nq, hq), float("-inf"), dtype=torch.float32, device=q.device)
    num_seg = qo_indptr.numel() - 1
    if nq == 0 or num_seg == 0:
        return o, lse
    max_q = int((qo_indptr[1:] - qo_indptr[:-1]).max())
    if max_q == 0:
        return o, lse
    has_mask = mask is not None
    qo_indptr = qo_indptr.to(device=q.device, dtype=torch.int64)
    kv_indptr = kv_indptr.to(device=q.device, dtype=torch.int64)
    mask_arg = mask.to(device=q.device, dtype=torch.uint8).contiguous() if has_mask else qo_indptr
    mask_ptr = mask_indptr.to(device=q.device, dtype=torch.int64) if has_mask else qo_indptr
    upcast = q.dtype == torch.float32 or q.device.type == "cpu"  # bf16 tl.dot is wrong when interpreted
    grid = (num_seg, triton.cdiv(max_q * (hq // hk), block_m), hk)
    _level_attn_kernel[grid](
        q, k, v, o, lse, mask_arg, qo_indptr, kv_indptr, mask_ptr,
        sm_scale * LOG2E, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        o.stride(0), o.stride(1), hq,
        GROUP=hq // hk, HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_block_d(d),
        HAS_MASK=has_mask, UPCAST=upcast)
    return o, lse


def merge_states(o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor,
                 lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attentions ([N, H, D] outputs, [N, H] natural-log LSE)."""
    n, h, d = o_a.shape
    o_a, o_b = o_a.contiguous(), o_b.contiguous()
    lse_a, lse_b = lse_a.float().contiguous(), lse_b.float().contiguous()
    o = torch.empty_like(o_a)
    lse = torch.empty_like(lse_a)
    rows, block_r = n * h, 16
    if rows:
        _merge_kernel[(triton.cdiv(rows, block_r),)](o_a, lse_a, o_b, lse_b, o, lse, rows, HEAD_DIM=d,
                                                     BLOCK_R=block_r, BLOCK_D=_block_d(d))
    return o, lse


def tree_verify_attention_triton(q: torch.Tensor, levels: Sequence[KVLevel], k_tree: torch.Tensor,
                                 v_tree: torch.Tensor, tree_mask: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """Same contract as ``reference.tree_verify_attention_ref``; o in q's dtype. Partial outputs stay
    in float32 until the last merge, so low-precision inputs round once."""
    b, t, hq, d = q.shape
    flat_q = q.reshape(b * t, hq, d).contiguous()
    rows = torch.arange(b + 1, device=q.device) * t
    o, lse = attention_level(flat_q, k_tree.reshape(b * t, *k_tree.shape[2:]).contiguous(),
                             v_tree.reshape(b * t, *v_tree.shape[2:]).contiguous(), rows, rows, sm_scale,
                             mask=tree_mask.reshape(-1), mask_indptr=torch.arange(b, device=q.device) * t * t,
                             out_dtype=torch.float32)
    for lvl in levels:
        o_l, lse_l = attention_level(flat_q, lvl.k.contiguous(), lvl.v.contiguous(), lvl.req_indptr * t,
                                     lvl.kv_indptr, sm_scale, out_dtype=torch.float32)
        o, lse = merge_states(o, lse, o_l, lse_l)
    return o.to(q.dtype).view(b, t, hq, -1)


def default_sm_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
