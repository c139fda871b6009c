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

from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.mem_cache.memory_pool import KVWriteLoc

from ..kernels.sglang_layout import tree_attention, tree_masks, tree_visibility, verify_slots

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch


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
        tree = tree_masks(spec.custom_mask, prefix.tolist(), d)
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
