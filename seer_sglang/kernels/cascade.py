"""GPU tree-verify attention with FlashInfer (0.7.2) cascade kernels.

``MultiLevelCascadeAttentionWrapper`` takes no custom mask and returns no LSE, so each level gets
its own ``BatchPrefillWithPagedKVCacheWrapper`` run with ``return_lse=True`` (what that wrapper does
internally): the shared levels unmasked, one query segment per group, and the draft tree with a
``custom_mask``. Outputs are merged with ``flashinfer.merge_state``. FlashInfer's LSE is base 2, and
so is merge_state; the LSE handed out is converted to natural log, this package's convention.

``cascade_layout`` builds the levels from an engine's KV pool (one row of KV slots per request, as
SGLang's ``req_to_token``): requests whose slots start alike share their prompt's KV through the
radix cache, and their common slots become one level-1 segment, read once for the whole group.
It is plain torch, so the layout is tested on CPU; the kernels need a CUDA GPU with FlashInfer,
q and KV in fp16 or bf16.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from .reference import KVLevel
from .sglang_layout import tree_masks

LN2 = math.log(2.0)
MIN_SHARED_SLOTS = 16  # a shorter common prefix costs an extra level for little saved reading


@dataclass(frozen=True)
class PagedLevel:
    """One level in FlashInfer's paged layout; its query segments must cover all query rows in order."""

    qo_indptr: torch.Tensor  # [S + 1] int32
    kv_indptr: torch.Tensor  # [S + 1] int32, in pages
    kv_indices: torch.Tensor  # [kv_indptr[-1]] int32 page ids
    kv_last_page_len: torch.Tensor  # [S] int32 (0 for a segment with no pages)

    @property
    def num_rows(self) -> int:
        """Query rows the level covers: the first ``qo_indptr[-1]`` rows of the batch."""
        return int(self.qo_indptr[-1])


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
        self._num_shared, self._empty_rows, self._rows = len(shared), [], []
        for w, lvl in zip(self._shared, shared):
            w.plan(lvl.qo_indptr, lvl.kv_indptr, lvl.kv_indices, lvl.kv_last_page_len, causal=False, **common)
            pages = lvl.kv_indptr[1:] - lvl.kv_indptr[:-1]
            q_lens = (lvl.qo_indptr[1:] - lvl.qo_indptr[:-1]).long()
            empty = torch.repeat_interleave(pages == 0, q_lens)
            self._empty_rows.append(empty if bool(empty.any()) else None)
            self._rows.append(lvl.num_rows)

    def run(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q [Nq, Hq, D]; caches [num_pages, page_size, Hk, D]. Returns (o, lse natural log).

        The tree level covers every row; a shared level may cover only the first rows (the
        requests that share anything), and only those are run and merged."""
        o, lse2 = self._tree.run(q, (k_cache, v_cache), return_lse=True)
        for w, empty, rows in zip(self._shared[:self._num_shared], self._empty_rows, self._rows):
            if rows == 0:
                continue
            o_l, lse_l = w.run(q[:rows], (k_cache, v_cache), return_lse=True)
            if empty is not None:  # a segment without keys contributes nothing, whatever the kernel wrote
                lse_l = lse_l.masked_fill(empty[:, None], float("-inf"))
                o_l = o_l.masked_fill(empty[:, None, None], 0)
            if rows == o.shape[0]:
                o, lse2 = self._fi.merge_state(o, lse2, o_l, lse_l)
            else:
                o_m, lse_m = self._fi.merge_state(o[:rows], lse2[:rows], o_l, lse_l)
                o, lse2 = torch.cat([o_m, o[rows:]]), torch.cat([lse_m, lse2[rows:]])
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


@dataclass(frozen=True)
class CascadeLayout:
    """One verify step's three levels over an engine's KV pool (page size 1), in query order.

    ``order[j]`` is the batch index of the j-th request in query order: members of a group that
    shares a prefix are contiguous, sharing groups first, so the shared level covers a prefix of
    the rows and no segment of any level is empty."""

    order: torch.Tensor  # [B] int64
    shared: PagedLevel  # one segment per sharing group: its common prompt slots
    own: PagedLevel  # one segment per request: its slots after the group's common ones (at least one)
    tree: PagedLevel  # one segment per request: its draft nodes' slots
    tree_mask: torch.Tensor  # flat bool, per request in query order its [D, D] block
    shared_slots: int  # KV rows of the shared level (each read once for its whole group)
    saved_slots: int  # KV rows the shared level saves against reading every request's prefix alone


def _csr(lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(lengths.numel() + 1, dtype=torch.int32, device=lengths.device)
    out[1:] = lengths.cumsum(0)
    return out


def cascade_layout(rows: torch.Tensor, seq_lens: torch.Tensor, tree_slots: torch.Tensor, tree_mask: torch.Tensor,
                   min_shared: int = 1, group_ids: torch.Tensor | None = None) -> CascadeLayout:
    """Levels of a tree verify from each request's KV slots.

    rows: [B, L] KV slots of each request (L >= max seq_len), as SGLang's ``req_to_token`` rows;
    seq_lens: [B] tokens cached before the tree (each >= 1); tree_slots: [B, D] slots of the draft
    nodes; tree_mask: [B, D, D] bool, node i sees node j. A group is the requests with the same
    ``group_ids`` entry (the rollout's prompt groups), or without them the requests whose first slot
    is the same (the radix cache gave them one prompt; prompts that only share a chat template then
    make one group sharing the template). Its shared prefix is the slots all members have in common,
    capped so that every member keeps at least one token of its own, and used only from
    ``min_shared`` slots on."""
    b, d = tree_slots.shape
    dev = rows.device
    seq = seq_lens.to(device=dev, dtype=torch.int64)
    idx = torch.arange(b, device=dev)
    key = rows[:, 0] if group_ids is None else group_ids.to(device=dev)
    _, group = torch.unique(key, return_inverse=True)
    num_groups = int(group.max()) + 1 if b else 0
    leader = torch.full((num_groups,), b, device=dev, dtype=torch.int64).scatter_reduce(0, group, idx, "amin")
    lead = leader[group]
    cols = torch.arange(rows.shape[1], device=dev).view(1, -1)
    same = (rows == rows[lead]) & (cols < torch.minimum(seq, seq[lead]).view(-1, 1))
    common = same.to(torch.int32).cumprod(1).sum(1).to(torch.int64)
    shared_g = torch.full((num_groups,), rows.shape[1], device=dev, dtype=torch.int64).scatter_reduce(
        0, group, torch.minimum(common, seq - 1), "amin")
    size_g = torch.bincount(group, minlength=num_groups)
    shared_g = torch.where((size_g > 1) & (shared_g >= max(1, min_shared)), shared_g, 0)
    shared = shared_g[group]  # per request

    # query order: sharing groups first (in order of their leaders), members contiguous, batch order kept
    key = ((shared == 0).to(torch.int64) * b + lead) * b + idx
    order = torch.argsort(key)
    shared_o, seq_o = shared[order], seq[order]
    sharing = torch.nonzero(shared_g > 0).flatten()
    sharing = sharing[torch.argsort(leader[sharing])]
    # shared level: the leader's first shared_g slots, one segment over all the group's rows
    lead_rows = rows[leader[sharing]]
    take = cols < shared_g[sharing].view(-1, 1)
    shared_level = PagedLevel(_csr(size_g[sharing] * d), _csr(shared_g[sharing]), lead_rows[take].to(torch.int32),
                              torch.ones(sharing.numel(), dtype=torch.int32, device=dev))
    # own level: slots [shared, seq) of each request
    rows_o = rows[order]
    own_take = (cols >= shared_o.view(-1, 1)) & (cols < seq_o.view(-1, 1))
    per_request = _csr(torch.full((b,), d, device=dev))  # D query rows each (and D tree slots each)
    one_page_each = torch.ones(b, dtype=torch.int32, device=dev)
    own_level = PagedLevel(per_request, _csr(seq_o - shared_o), rows_o[own_take].to(torch.int32), one_page_each)
    tree_level = PagedLevel(per_request, per_request, tree_slots[order].reshape(-1).to(torch.int32), one_page_each)
    shared_slots = int(shared_g[sharing].sum())
    saved = int((shared_g[sharing] * (size_g[sharing] - 1)).sum())
    return CascadeLayout(order, shared_level, own_level, tree_level, tree_mask[order].reshape(-1).bool(),
                         shared_slots, saved)


def run_cascade_layout(verifier: CascadeTreeVerify, layout: CascadeLayout, q: torch.Tensor, k_cache: torch.Tensor,
                       v_cache: torch.Tensor) -> torch.Tensor:
    """Attention of a verify step's queries (batch order, [B * D, Hq, hd]) under a planned layout;
    the caches are page-size-1 views [slots, 1, Hk, hd]. Returns o in batch order."""
    b = layout.order.numel()
    d = q.shape[0] // max(1, b)
    q_o = q.view(b, d, *q.shape[1:])[layout.order].reshape(q.shape)
    o, _ = verifier.run(q_o.contiguous(), k_cache, v_cache)
    out = torch.empty_like(o.view(b, d, *o.shape[1:]))
    out[layout.order] = o.view(b, d, *o.shape[1:])
    return out.view(o.shape)


def plan_layout(verifier: CascadeTreeVerify, layout: CascadeLayout, num_qo_heads: int, num_kv_heads: int,
                head_dim: int, sm_scale: float, q_dtype: torch.dtype, kv_dtype: torch.dtype) -> None:
    """Plan the verifier's wrappers for a layout (once per verify step, shared by all layers)."""
    verifier.plan([layout.shared, layout.own], layout.tree, layout.tree_mask, num_qo_heads, num_kv_heads, head_dim,
                  1, sm_scale, q_dtype, kv_dtype)


def verify_layout(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                  seq_lens_cpu: list[int], tree_locs: torch.Tensor, custom_mask: torch.Tensor,
                  min_shared: int = MIN_SHARED_SLOTS, group_ids: torch.Tensor | None = None) -> CascadeLayout | None:
    """The cascade layout of one verify step from SGLang's own verify inputs, or None where no
    group shares ``min_shared`` slots (FlashInfer's single-level verify is then as good).
    ``group_ids``: the rollout group of each request, as the SEER worker tags the verify input."""
    bs, d = tree_locs.shape
    width = max(seq_lens_cpu)
    rows = req_to_token[req_pool_indices.long(), :width]
    tree = tree_masks(custom_mask, seq_lens_cpu, d)
    layout = cascade_layout(rows, seq_lens, tree_locs, tree, min_shared, group_ids)
    return layout if layout.shared_slots else None
