"""``seer_verify``: SGLang's torch-native attention plus a target-verify (draft tree) mode.

A speculative verify step runs the draft tree's nodes as one extend batch. Each node must see the
request's cached prefix and only its own ancestors in the tree, which SGLang passes as a custom
mask in ``forward_batch.spec_info``. The torch-native backend has no such mode (it asserts on the
missing extend lengths), so the CPU engine cannot verify a tree. This backend keeps torch-native
for prefill and decode and adds the masked verify; select it with ``--attention-backend
seer_verify``. The same torch code runs on CUDA tensors as a slow reference (CUDA graphs off).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.nn.functional import scaled_dot_product_attention

from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.mem_cache.memory_pool import KVWriteLoc

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


def tree_masks(custom_mask: torch.Tensor, prefix_lens: list[int], num_draft: int) -> list[torch.Tensor]:
    """Per-request [num_draft, num_draft] bool masks (row i: the nodes that node i may see).

    SGLang sends one of two layouts: on CPU only the tree block (``bs * D * D``), on GPU the
    full rows over prefix + tree (``sum((prefix + D) * D)``, larger since every prefix holds at
    least one token), whose last D columns are the tree. Every node also sees itself.
    """
    d = num_draft
    eye = torch.eye(d, dtype=torch.bool, device=custom_mask.device)
    bs = len(prefix_lens)
    if custom_mask.numel() == bs * d * d:
        return [m | eye for m in custom_mask.view(bs, d, d).to(torch.bool)]
    out, pos = [], 0
    for p in prefix_lens:
        rows = custom_mask[pos:pos + (p + d) * d].view(d, p + d).to(torch.bool)
        out.append(rows[:, p:] | eye)
        pos += (p + d) * d
    return out


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


def verify_slots(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor,
                 tree_locs: torch.Tensor) -> torch.Tensor:
    """[B, max prefix + D] KV rows: each request's cached prefix, then its tree nodes' slots."""
    b, d = tree_locs.shape
    width = int(prefix_lens.max()) + d
    slots = req_to_token[req_pool_indices.long(), :width].to(torch.int64)
    cols = prefix_lens.view(-1, 1).long() + torch.arange(d, device=slots.device)
    slots[torch.arange(b, device=slots.device).view(-1, 1), cols] = tree_locs.to(torch.int64)
    return slots


class SeerVerifyAttnBackend(TorchNativeAttnBackend):
    """Torch-native attention with a tree-masked target-verify mode."""

    def forward_extend(self, q, k, v, layer: RadixAttention, forward_batch: ForwardBatch, save_kv_cache=True,
                       **kwargs):
        if not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache)
        return self.forward_target_verify(q, k, v, layer, forward_batch, save_kv_cache)

    def forward_target_verify(self, q, k, v, layer: RadixAttention, forward_batch: ForwardBatch,
                              save_kv_cache: bool = True) -> torch.Tensor:
        if layer.is_cross_attention or (layer.sliding_window_size is not None and layer.sliding_window_size > -1):
            raise NotImplementedError("seer_verify: tree verify supports plain causal self-attention only")
        cache_loc = forward_batch.out_cache_loc
        if save_kv_cache and k is not None and v is not None:
            self.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc(cache_loc, self.swa_out_cache_loc), k, v)

        spec = forward_batch.spec_info
        d = spec.draft_token_num
        prefix, slots, visible = self._layout(forward_batch, cache_loc)
        bs = prefix.numel()
        # A compacted verify (see SeerSpecWorker) brings only the used nodes of the [bs, d] layout:
        # place them in it; the unused ones attend to themselves and are dropped again.
        used = getattr(spec, "compact_nodes", None)
        if used is not None:
            q = q.new_zeros((bs * d, q.shape[-1])).index_copy_(0, used, q.reshape(used.numel(), -1))
        q_ = q.reshape(bs, d, layer.tp_q_head_num, layer.qk_head_dim)
        o = tree_attention(q_, self.token_to_kv_pool.get_key_buffer(layer.layer_id),
                           self.token_to_kv_pool.get_value_buffer(layer.layer_id), slots, prefix, None,
                           layer.scaling, layer.tp_q_head_num != layer.tp_k_head_num, visible)
        o = o.reshape(bs * d, layer.tp_q_head_num * layer.v_head_dim)
        return o if used is None else o[used]

    def _layout(self, forward_batch: ForwardBatch, cache_loc: torch.Tensor):
        """(prefix lengths, KV rows, visibility) of this verify step: built by its first layer and
        kept on the batch for the others, which share them."""
        cached = getattr(forward_batch, "_seer_verify_layout", None)
        if cached is not None:
            return cached
        spec = forward_batch.spec_info
        d = spec.draft_token_num
        prefix = forward_batch.seq_lens.to(torch.int64)
        if getattr(spec, "compact_nodes", None) is not None:
            cache_loc = spec.tree_cache_loc
        tree = torch.stack(tree_masks(spec.custom_mask, prefix.tolist(), d))
        slots = verify_slots(self.req_to_token_pool.req_to_token, forward_batch.req_pool_indices, prefix,
                             cache_loc.view(prefix.numel(), d))
        layout = prefix, slots, tree_visibility(slots, prefix, tree)
        forward_batch._seer_verify_layout = layout
        return layout


def create_backend(runner) -> SeerVerifyAttnBackend:
    """Factory registered with SGLang's attention registry (runs in the scheduler process)."""
    from . import cpu_ops

    if runner.device == "cpu" or str(runner.device).startswith("cpu"):
        cpu_ops.install_lazy()
    return SeerVerifyAttnBackend(runner)
