"""FlashInfer's paged prefill wrapper and merge_state as documented (paged KV, flat custom_mask,
base-2 LSE), in torch: the cascade verifier's layouts are checked against it on machines without a
GPU, and against the real kernels on one."""

from __future__ import annotations

import importlib.machinery
import math
import types

import torch

from seer_sglang.kernels.reference import attention_with_lse_ref, merge_states_ref


class TorchPrefillWrapper:
    """FlashInfer's BatchPrefillWithPagedKVCacheWrapper as documented (paged KV, flat custom_mask,
    base-2 LSE), in torch. Rows of a segment with no keys get NaN, so callers must not rely on them."""

    def __init__(self, workspace, kv_layout="NHD"):
        assert kv_layout == "NHD"

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
             num_kv_heads, head_dim_qk, page_size, custom_mask=None, causal=False, sm_scale=None,
             q_data_type=None, kv_data_type=None):
        assert not causal
        self.plan_args = (qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, page_size)
        self.mask, self.sm_scale = custom_mask, sm_scale

    def run(self, q, paged_kv_cache, return_lse=False):
        qo, indptr, indices, last, page_size = self.plan_args
        k_cache, v_cache = paged_kv_cache
        o = torch.full(q.shape, float("nan"), dtype=q.dtype)
        lse = torch.full(q.shape[:2], float("nan"))
        m0 = 0
        for s in range(qo.numel() - 1):
            pages = indices[indptr[s]:indptr[s + 1]].long()
            kv_len = max(int(indptr[s + 1] - indptr[s]) - 1, 0) * page_size + int(last[s])
            q0, q1 = int(qo[s]), int(qo[s + 1])
            mask = None
            if self.mask is not None:
                mask = self.mask[m0:m0 + (q1 - q0) * kv_len].view(q1 - q0, kv_len)
                m0 += (q1 - q0) * kv_len
            if kv_len == 0:
                continue
            k = k_cache[pages].flatten(0, 1)[:kv_len]
            v = v_cache[pages].flatten(0, 1)[:kv_len]
            o_s, lse_s = attention_with_lse_ref(q[q0:q1], k, v, self.sm_scale, mask)
            o[q0:q1], lse[q0:q1] = o_s.to(q.dtype), lse_s / math.log(2.0)
        return (o, lse) if return_lse else o


def torch_merge_state_base2(v_a, s_a, v_b, s_b):
    o, lse = merge_states_ref(v_a, s_a * math.log(2.0), v_b, s_b * math.log(2.0))
    return o.to(v_a.dtype), lse / math.log(2.0)


def torch_flashinfer() -> types.ModuleType:
    """A stand-in for the ``flashinfer`` module with the two names the cascade path uses."""
    module = types.ModuleType("flashinfer")
    module.__spec__ = importlib.machinery.ModuleSpec("flashinfer", None)
    module.BatchPrefillWithPagedKVCacheWrapper = TorchPrefillWrapper
    module.merge_state = torch_merge_state_base2
    return module
