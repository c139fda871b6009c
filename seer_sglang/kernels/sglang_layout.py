"""Tree verify in SGLang's layout, in plain torch (no SGLang import, so GPU kernel checks run without it).

A verify step hands the attention backend each request's cached prefix as ``req_to_token`` rows and
``seq_lens``, the draft nodes' KV slots as ``out_cache_loc`` ([B, D]) and the tree as
``spec_info.custom_mask``. These helpers turn that into per-request tree masks and KV rows, and
compute the tree attention directly: the ``seer_verify`` backend's CPU path and the reference the
cascade path is checked against.
"""

from __future__ import annotations

import torch
from torch.nn.functional import scaled_dot_product_attention


def tree_masks(custom_mask: torch.Tensor, prefix_lens: list[int], num_draft: int) -> torch.Tensor:
    """[B, num_draft, num_draft] bool masks (row i: the nodes that node i may see), in one gather.

    SGLang sends one of two layouts: on CPU only the tree block (``bs * D * D``), on GPU the
    full rows over prefix + tree (``sum((prefix + D) * D)``, larger since every prefix holds at
    least one token), whose last D columns are the tree. Every node also sees itself.
    """
    d, dev = num_draft, custom_mask.device
    eye = torch.eye(d, dtype=torch.bool, device=dev)
    bs = len(prefix_lens)
    if custom_mask.numel() == bs * d * d:
        return custom_mask.view(bs, d, d).to(torch.bool) | eye
    prefix = torch.tensor(prefix_lens, dtype=torch.int64, device=dev)
    row = prefix + d  # each request's block is d rows of prefix + d columns
    start = torch.cumsum(row * d, 0) - row * d
    nodes = torch.arange(d, device=dev)
    idx = (start + prefix).view(-1, 1, 1) + nodes.view(1, -1, 1) * row.view(-1, 1, 1) + nodes.view(1, 1, -1)
    return custom_mask[idx].to(torch.bool) | eye


def verify_slots(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor,
                 tree_locs: torch.Tensor) -> torch.Tensor:
    """[B, max prefix + D] KV rows: each request's cached prefix, then its tree nodes' slots."""
    b, d = tree_locs.shape
    width = int(prefix_lens.max()) + d
    slots = req_to_token[req_pool_indices.long(), :width].to(torch.int64)
    cols = prefix_lens.view(-1, 1).long() + torch.arange(d, device=slots.device)
    slots[torch.arange(b, device=slots.device).view(-1, 1), cols] = tree_locs.to(torch.int64)
    return slots


def tree_visibility(slots: torch.Tensor, prefix_lens: torch.Tensor, tree: torch.Tensor) -> torch.Tensor:
    """[B, 1, D, L] bool: prefix keys are visible to every node, tree keys where ``tree`` allows,
    padding (columns from p_b + D on) to none. The same for every layer of one verify step."""
    b, d = tree.shape[:2]
    cols = torch.arange(slots.shape[1], device=slots.device).view(1, 1, -1)
    start = prefix_lens.view(-1, 1, 1)
    in_tree = (cols >= start) & (cols < start + d)
    tree_col = (cols - start).clamp(0, d - 1).expand(b, d, -1)
    return ((cols < start) | (in_tree & tree.gather(2, tree_col))).unsqueeze(1)


def tree_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                   prefix_lens: torch.Tensor, tree: torch.Tensor | None, scale: float, enable_gqa: bool,
                   visible: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of every request's tree nodes over its prefix and its tree, in one batched call.

    q: [B, D, Hq, hd]; slots: [B, L] KV-pool rows, request b's prefix in [0, p_b) and its tree nodes
    in [p_b, p_b + D); tree: [B, D, D] bool; ``visible``: ``tree_visibility`` of these, when the
    caller already built it. Returns [B, D, Hq, hd_v].
    """
    if visible is None:
        visible = tree_visibility(slots, prefix_lens, tree)
    keys = k_cache[slots].permute(0, 2, 1, 3).to(q.dtype)  # [B, Hkv, L, hd]
    values = v_cache[slots].permute(0, 2, 1, 3).to(q.dtype)
    out = scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=visible, scale=scale,
                                       enable_gqa=enable_gqa)
    return out.transpose(1, 2)
