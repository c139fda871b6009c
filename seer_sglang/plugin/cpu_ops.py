"""Torch versions of the ``sgl_kernel`` ops on SGLang's tree-verify path, for the CPU engine.

SGLang's CPU build imports these ops from ``sgl_kernel`` (an AMX/CUDA wheel that does not exist
here), so a speculative step on CPU dies in the first kernel it calls. Each function below keeps
the exact signature and in-place contract of the op it stands in for. ``spec_registry`` hooks them
into the SGLang modules that imported the missing names (``install_lazy`` does the heavy modules
from the scheduler). The tree acceptance ops are ``seer_sglang.speculative.acceptance``'s.
"""

from __future__ import annotations

import ctypes
import logging

import torch

from ..speculative.acceptance import tree_speculative_sampling_target_only_torch, verify_tree_greedy_torch

logger = logging.getLogger("seer_sglang.plugin")


def _packed_segments(req_pool_indices: torch.Tensor, start_offset: torch.Tensor, end_offset: torch.Tensor):
    """(request, its slice of req_to_token, its slice of the packed buffer) for requests whose
    ``end - start`` entries lie end to end in one packed buffer."""
    pos = 0
    for req, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        yield req, slice(start, end), slice(pos, pos + end - start)
        pos += end - start


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """req_to_token[req, start:end] = the next (end - start) entries of out_cache_loc."""
    for req, row, packed in _packed_segments(req_pool_indices, start_offset, end_offset):
        req_to_token[req, row] = out_cache_loc[packed].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """The inverse gather: out_cache_loc (packed) = req_to_token[req, start:end] per request."""
    for req, row, packed in _packed_segments(req_pool_indices, start_offset, end_offset):
        out_cache_loc[packed] = req_to_token[req, row].to(out_cache_loc.dtype)


def fill_accept_out_cache_loc_cpu(accept_index: torch.Tensor, out_cache_loc: torch.Tensor,
                                  accept_out_cache_loc: torch.Tensor) -> None:
    """Pack out_cache_loc[i] for every accepted index i (entries of -1 are skipped)."""
    flat = accept_index.reshape(-1)
    valid = flat[flat != -1].to(torch.int64)
    accept_out_cache_loc[: valid.numel()] = out_cache_loc[valid].to(accept_out_cache_loc.dtype)


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor,
                                src_loc: torch.Tensor) -> None:
    """Copy KV slot rows src -> tgt in every buffer; SGLang passes the buffers as raw addresses.

    All rows are read before any is written, like the parallel kernel; accepted tokens move to the
    front of their verify window, so no target is another move's source either way.
    """
    tgt, src = tgt_loc.to(torch.int64), src_loc.to(torch.int64)
    if tgt.numel() == 0:
        return
    rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        view = torch.frombuffer((ctypes.c_uint8 * (rows * stride)).from_address(ptr), dtype=torch.uint8)
        view = view.view(rows, stride)
        view[tgt] = view[src]


def reconstruct_indices_from_tree_mask(tree_mask: torch.Tensor, verified_seq_len: torch.Tensor,
                                       positions: torch.Tensor, retrive_index: torch.Tensor,
                                       retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
                                       batch_size: int, draft_token_num: int) -> None:
    """Tree links from an ancestor mask (``mask[b, i, j]``: node j is an ancestor of node i).

    Same contract as SGLang's kernel: position = depth + verified length, parent = deepest
    ancestor, first child and next sibling = the smallest such node index.
    """
    if batch_size == 0:
        return
    n = draft_token_num
    mask = tree_mask[: batch_size * n * n].view(batch_size, n, n).to(torch.bool)
    order = torch.arange(n, device=mask.device)
    anc = mask & (order.view(1, 1, n) < order.view(1, n, 1))  # strict ancestors of row i
    depth = anc.sum(-1)
    positions[: batch_size * n] = (depth + verified_seq_len.view(-1, 1).to(depth.dtype)).reshape(-1).to(positions.dtype)
    retrive_index[:batch_size] = (torch.arange(batch_size, device=mask.device).view(-1, 1) * n + order).to(
        retrive_index.dtype)
    parent = torch.where(anc.any(-1), (anc * order).argmax(-1), torch.full_like(depth, -1))
    sentinel = torch.full((batch_size, n, n), n, dtype=torch.long, device=mask.device)
    rows = order.view(1, n, 1).expand(batch_size, n, n)
    child_of = torch.where(anc, rows, sentinel).min(dim=1).values  # column j: first k with j ancestor of k
    retrive_next_token[:batch_size] = torch.where(child_of < n, child_of, -1).to(retrive_next_token.dtype)
    same_parent = (parent.unsqueeze(2) == parent.unsqueeze(1)) & (order.view(1, n, 1) > order.view(1, 1, n))
    sibling = torch.where(same_parent, rows, sentinel).min(dim=1).values
    sibling = torch.where((parent >= 0) & (sibling < n), sibling, -1)
    retrive_next_sibling[:batch_size] = sibling.to(retrive_next_sibling.dtype)


def top_k_renorm_prob(probs: torch.Tensor, top_ks: torch.Tensor) -> torch.Tensor:
    """Keep each row's k most likely tokens (by sorted rank, as SGLang's torch sampler) and renormalize."""
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    rank = torch.arange(probs.shape[-1], device=probs.device).view(1, -1)
    keep = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, rank < top_ks.view(-1, 1))
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(-1, keepdim=True)


def top_p_renorm_prob(probs: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """Keep the tokens whose more likely mass is at most p (SGLang's torch sampler rule), renormalized."""
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    before = torch.cumsum(sorted_p, dim=-1) - sorted_p
    keep_sorted = before <= top_ps.view(-1, 1).to(probs.dtype)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(-1, keepdim=True)


def _verify_uses_greedy(*, is_all_greedy: bool, is_cpu: bool, is_hip: bool, is_xpu: bool,
                        use_rejection_sampling: bool) -> bool:
    """SGLang forces argmax verification on CPU for lack of a sampling kernel; with the torch
    sampler above, CPU verifies by tree rejection sampling like CUDA does."""
    return is_all_greedy or is_xpu or (is_hip and not use_rejection_sampling)


# (module, attribute) -> replacement. Modules bind these names at import time on the CPU engine.
# Cheap modules, hooked at plugin load: the KV pool runs a copy at start-up.
KERNEL_OPS = {
    ("sglang.kernels.ops.speculative.cache_locs", "assign_extend_cache_locs_cpu"): assign_extend_cache_locs_cpu,
    ("sglang.kernels.ops.speculative.eagle", "fill_accept_out_cache_loc_cpu"): fill_accept_out_cache_loc_cpu,
    ("sglang.kernels.ops.kvcache.cache_move", "copy_all_layer_kv_cache_cpu"): copy_all_layer_kv_cache_cpu,
    ("sglang.kernels.ops.speculative.reconstruct_tree", "reconstruct_indices_from_tree_mask"):
        reconstruct_indices_from_tree_mask,
    ("sglang.kernels.ops.speculative.spec_tree", "sgl_verify_tree_greedy_cpu"): verify_tree_greedy_torch,
}
# In modules that take seconds to import: installed in the scheduler only (install_lazy).
LAZY_KERNEL_OPS = {
    ("sglang.srt.mem_cache.allocation", "assign_req_to_token_pool_cpu"): assign_req_to_token_pool_cpu,
}
# Names that are None on CPU (no kernel at all) in the module that samples the verify step.
SAMPLING_OPS = {
    "tree_speculative_sampling_target_only": tree_speculative_sampling_target_only_torch,
    "top_k_renorm_prob": top_k_renorm_prob,
    "top_p_renorm_prob": top_p_renorm_prob,
    "_verify_uses_greedy": _verify_uses_greedy,
}


def install_lazy() -> None:
    """Put the ops of heavy modules in place; runs in the scheduler, once a verifier is built.

    Direct assignment, not a hook: the sampling names are ``None`` on CPU, and the hook registry
    would re-point every module attribute that is ``None`` to the replacement.
    """
    import importlib

    global _lazy_done
    if _lazy_done:
        return
    for (module, name), fn in LAZY_KERNEL_OPS.items():
        setattr(importlib.import_module(module), name, fn)
    # Paged speculative allocation: SGLang picks a Triton kernel for every backend but torch_native.
    allocation = importlib.import_module("sglang.srt.mem_cache.allocation")
    allocation.get_last_loc = allocation.get_last_loc_torch
    eagle_utils = importlib.import_module("sglang.srt.speculative.eagle_utils")
    for name, fn in SAMPLING_OPS.items():
        setattr(eagle_utils, name, fn)
    _lazy_done = True
    logger.info("torch tree-verify ops installed for the CPU engine")


_lazy_done = False
