"""GPU tree-verify attention with FlashInfer (0.7.2) cascade kernels.

``MultiLevelCascadeAttentionWrapper`` takes no custom mask and returns no LSE, so each level gets
its own ``BatchPrefillWithPagedKVCacheWrapper`` run with ``return_lse=True`` (what that wrapper does
internally): the shared levels unmasked, one query segment per group, and the draft tree with a
``custom_mask``. Outputs are merged with ``flashinfer.merge_state``. FlashInfer's LSE is base 2, and
so is merge_state; the LSE handed out is converted to natural log, this package's convention.

Needs a CUDA GPU with FlashInfer; q and KV in fp16 or bf16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from .reference import KVLevel

LN2 = math.log(2.0)


@dataclass(frozen=True)
class PagedLevel:
    """One level in FlashInfer's paged layout; its query segments must cover all query rows in order."""

    qo_indptr: torch.Tensor  # [S + 1] int32
    kv_indptr: torch.Tensor  # [S + 1] int32, in pages
    kv_indices: torch.Tensor  # [kv_indptr[-1]] int32 page ids
    kv_last_page_len: torch.Tensor  # [S] int32 (0 for a segment with no pages)


class CascadeTreeVerify:
    """Plan once per verify step, run once per layer."""

    def __init__(self, device: torch.device | str = "cuda", workspace_bytes: int = 128 << 20):
        import flashinfer

        self._fi = flashinfer
        self._workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=device)
        self._tree = None
        self._shared: list = []  # wrappers are kept across plans: each holds its own buffers
        self._num_shared = 0
        self._empty_rows: list[torch.Tensor] = []

    def _wrapper(self):
        return self._fi.BatchPrefillWithPagedKVCacheWrapper(self._workspace, "NHD")

    def plan(self, shared: Sequence[PagedLevel], tree: PagedLevel, tree_mask: torch.Tensor, num_qo_heads: int,
             num_kv_heads: int, head_dim: int, page_size: int, sm_scale: float, q_dtype: torch.dtype,
             kv_dtype: torch.dtype) -> None:
        """``tree_mask``: flat bool, each request's [q_len, kv_len] block row-major (``custom_mask``)."""
        common = dict(num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads, head_dim_qk=head_dim,
                      page_size=page_size, sm_scale=sm_scale, q_data_type=q_dtype, kv_data_type=kv_dtype)
        self._tree = self._tree or self._wrapper()
        self._tree.plan(tree.qo_indptr, tree.kv_indptr, tree.kv_indices, tree.kv_last_page_len,
                        custom_mask=tree_mask.reshape(-1).bool(), causal=False, **common)
        while len(self._shared) < len(shared):
            self._shared.append(self._wrapper())
        self._num_shared, self._empty_rows = len(shared), []
        for w, lvl in zip(self._shared, shared):
            w.plan(lvl.qo_indptr, lvl.kv_indptr, lvl.kv_indices, lvl.kv_last_page_len, causal=False, **common)
            pages = lvl.kv_indptr[1:] - lvl.kv_indptr[:-1]
            q_lens = (lvl.qo_indptr[1:] - lvl.qo_indptr[:-1]).long()
            self._empty_rows.append(torch.repeat_interleave(pages == 0, q_lens))

    def run(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q [Nq, Hq, D]; caches [num_pages, page_size, Hk, D]. Returns (o, lse natural log)."""
        o, lse2 = self._tree.run(q, (k_cache, v_cache), return_lse=True)
        for w, empty in zip(self._shared[:self._num_shared], self._empty_rows):
            o_l, lse_l = w.run(q, (k_cache, v_cache), return_lse=True)
            # a segment without keys contributes nothing, whatever the kernel wrote for it
            lse_l = lse_l.masked_fill(empty[:, None], float("-inf"))
            o_l = o_l.masked_fill(empty[:, None, None], 0)
            o, lse2 = self._fi.merge_state(o, lse2, o_l, lse_l)
        return o, lse2 * LN2


def _token_pages(kv_indptr: torch.Tensor, offset: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Page-size-1 layout of a packed level whose rows start at ``offset`` in the joint cache."""
    base = int(kv_indptr[0])
    indptr = (kv_indptr - base).to(torch.int32)
    indices = torch.arange(base, int(kv_indptr[-1]), device=kv_indptr.device, dtype=torch.int32) + offset
    last = ((indptr[1:] - indptr[:-1]) > 0).to(torch.int32)
    return indptr, indices, last


def tree_verify_attention_cascade(q: torch.Tensor, levels: Sequence[KVLevel], k_tree: torch.Tensor,
                                  v_tree: torch.Tensor, tree_mask: torch.Tensor, sm_scale: float,
                                  verifier: CascadeTreeVerify | None = None) -> torch.Tensor:
    """Same contract as ``reference.tree_verify_attention_ref``, on GPU; o in q's dtype.

    Copies all levels into one page-size-1 cache; an attention backend would instead plan
    ``CascadeTreeVerify`` on its own KV pool's page indices."""
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError("FlashInfer prefill kernels take fp16 or bf16")
    b, t, hq, d = q.shape
    hk = k_tree.shape[2]
    dev = q.device
    ks, vs, shared, offset = [], [], [], 0
    for lvl in levels:
        indptr, indices, last = _token_pages(lvl.kv_indptr.to(dev), offset)
        shared.append(PagedLevel((lvl.req_indptr.to(dev) * t).to(torch.int32), indptr, indices, last))
        ks.append(lvl.k)
        vs.append(lvl.v)
        offset += lvl.k.shape[0]
    rows = (torch.arange(b + 1, device=dev) * t).to(torch.int32)
    tree = PagedLevel(rows, rows, torch.arange(b * t, device=dev, dtype=torch.int32) + offset,
                      torch.ones(b, device=dev, dtype=torch.int32))
    ks.append(k_tree.reshape(b * t, hk, -1))
    vs.append(v_tree.reshape(b * t, hk, -1))
    k_cache = torch.cat([x.to(q.dtype) for x in ks]).unsqueeze(1).contiguous()
    v_cache = torch.cat([x.to(q.dtype) for x in vs]).unsqueeze(1).contiguous()

    verifier = verifier or CascadeTreeVerify(dev)
    verifier.plan(shared, tree, tree_mask.reshape(-1).to(dev), hq, hk, d, 1, sm_scale, q.dtype, q.dtype)
    o, _ = verifier.run(q.reshape(b * t, hq, d).contiguous(), k_cache, v_cache)
    return o.view(b, t, hq, -1)
