"""``seer_cascade``: SGLang's FlashInfer backend with a cascade tree verify for sibling groups.

A GRPO batch verifies G siblings of each prompt at once, and the radix cache gives them one copy of
the prompt's KV. SGLang's verify reads that copy once per request; this backend reads it once per
group. Eager target-verify steps run three FlashInfer levels merged by LSE (``seer_sglang.kernels.cascade``):
the group's common prompt slots (one query segment per group), each request's own tokens, and the
draft tree under its mask. Groups are the rollout's (the SEER worker tags each verify input with its
requests' groups), else the requests whose KV starts in the same slot. Prefill, decode and CUDA-graph
steps are FlashInfer's own, unchanged; a verify step whose batch shares nothing also keeps
FlashInfer's single-level verify.

Select it with ``--attention-backend seer_cascade`` (GPU only). It supports plain causal
self-attention with a page size of 1, as the SEER algorithm runs it; other layers raise.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import torch

from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend
from sglang.srt.mem_cache.memory_pool import KVWriteLoc

from ..kernels.cascade import CascadeLayout, CascadeTreeVerify, plan_layout, run_cascade_layout, verify_layout

if TYPE_CHECKING:
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

logger = logging.getLogger("seer_sglang.plugin")
LOG_EVERY_S = 30.0


class SeerCascadeAttnBackend(FlashInferAttnBackend):
    """FlashInfer, with eager target-verify steps of sibling groups run as a three-level cascade."""

    def __init__(self, model_runner, *args, **kwargs):
        super().__init__(model_runner, *args, **kwargs)
        self.verifier = CascadeTreeVerify(model_runner.device)
        self._layout: CascadeLayout | None = None
        self._planned: tuple | None = None  # (scale, heads, dtypes) the verifier was planned for this step
        self.saved_slots = self.read_slots = 0  # context KV rows the cascade did not read / did read
        self.cascade_steps = 0
        self._next_log = 0.0

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        self._layout, self._planned = None, None
        if forward_batch.forward_mode.is_target_verify() and not torch.cuda.is_current_stream_capturing():
            self._layout = self._layout_of(forward_batch)
            if self._layout is not None:
                return
        super().init_forward_metadata(forward_batch)

    def init_forward_metadata_out_graph(self, forward_batch: ForwardBatch, in_capture: bool = False):
        self._layout = None  # graph steps keep FlashInfer's captured verify
        return super().init_forward_metadata_out_graph(forward_batch, in_capture)

    def _layout_of(self, forward_batch: ForwardBatch) -> CascadeLayout | None:
        spec = forward_batch.spec_info
        mask = getattr(spec, "custom_mask", None)
        if mask is None or self.use_sliding_window_kv_pool or self.page_size != 1:
            return None
        bs, d = forward_batch.batch_size, spec.draft_token_num
        seq_cpu = forward_batch.seq_lens_cpu
        seq_cpu = (seq_cpu if seq_cpu is not None else forward_batch.seq_lens).tolist()[:bs]
        layout = verify_layout(self.req_to_token_pool.req_to_token, forward_batch.req_pool_indices[:bs],
                               forward_batch.seq_lens[:bs], seq_cpu, forward_batch.out_cache_loc.view(bs, d), mask,
                               group_ids=getattr(spec, "group_ids", None))
        if layout is not None:
            self._note(bs, layout)
        return layout

    def _note(self, bs: int, layout: CascadeLayout) -> None:
        """Count what the shared level saved; a log line on the first cascade step and every 30 s."""
        self.cascade_steps += 1
        self.saved_slots += layout.saved_slots
        self.read_slots += layout.shared_slots + int(layout.own.kv_indptr[-1])
        now = time.monotonic()
        if now >= self._next_log:
            self._next_log = now + LOG_EVERY_S
            logger.info("seer_cascade: cascade verify steps %d (this one: %d requests, %d shared prompt slots); "
                        "context KV reads saved so far %.0f%%", self.cascade_steps, bs, layout.shared_slots,
                        100.0 * self.saved_slots / max(1, self.saved_slots + self.read_slots))

    def forward_extend(self, q, k, v, layer: RadixAttention, forward_batch: ForwardBatch, save_kv_cache=True,
                       **kwargs):
        layout = self._layout
        if layout is None or not forward_batch.forward_mode.is_target_verify():
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)
        if layer.is_cross_attention or layer.logit_cap or (layer.sliding_window_size or -1) > -1:
            raise NotImplementedError("seer_cascade: cascade verify supports plain causal self-attention only; "
                                      "use --attention-backend flashinfer")
        if save_kv_cache and k is not None and v is not None:
            self.token_to_kv_pool.set_kv_buffer(layer, KVWriteLoc.for_layer(forward_batch, layer, swa_loc=None),
                                                k, v, *self._kv_write_scales(layer))
        k_buf, v_buf = self.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        hq, hk, hd = layer.tp_q_head_num, layer.tp_k_head_num, layer.head_dim
        # planned by the first layer of the step; again only if a layer differs (scale, heads, dtypes)
        shape = (layer.scaling, hq, hk, hd, q.dtype, k_buf.dtype)
        if self._planned != shape:
            plan_layout(self.verifier, layout, hq, hk, hd, layer.scaling, q.dtype, k_buf.dtype)
            self._planned = shape
        o = run_cascade_layout(self.verifier, layout, q.reshape(-1, hq, hd), k_buf.view(-1, 1, hk, hd),
                               v_buf.view(-1, 1, hk, layer.v_head_dim))
        return o.reshape(-1, hq * layer.v_head_dim)


def create_backend(runner) -> SeerCascadeAttnBackend:
    """Factory registered with SGLang's attention registry (scheduler process, GPU only)."""
    if not torch.cuda.is_available():
        raise RuntimeError("seer_cascade needs a CUDA GPU with FlashInfer; on CPU use seer_verify")
    return SeerCascadeAttnBackend(runner)
