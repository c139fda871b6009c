"""HiCache (host DRAM tier + shared L3 pool) on CPU, without touching SGLang's GPU paths.

SGLang's host KV pool pins its memory and imports its host<->device copy ops from the CUDA
``sgl_kernel`` only. On CPU both fail, so the global KV pool could not run in tests. This module
gives the host pool unpinned memory and binds torch versions of the three "direct" transfer ops
(the ones the ``direct`` io backend calls) into the pool modules. It does nothing on CUDA/HIP.
"""

from __future__ import annotations

import logging
import sys
from typing import Sequence

import torch

logger = logging.getLogger("seer_sglang.plugin")

_POOL_MODULES = ("sglang.srt.mem_cache.pool_host.mha", "sglang.srt.mem_cache.pool_host.mla")


def transfer_kv_direct(src_layers: Sequence[torch.Tensor], dst_layers: Sequence[torch.Tensor],
                       src_indices: torch.Tensor, dst_indices: torch.Tensor, page_size: int) -> None:
    """Token-indexed copy, one (src, dst) pair per layer buffer, both laid out layer first."""
    src_idx = src_indices.to(torch.long)
    dst_idx = dst_indices.to(torch.long)
    for src, dst in zip(src_layers, dst_layers):
        dst[dst_idx.to(dst.device)] = src[src_idx.to(src.device)].to(dst.device)


def transfer_kv_per_layer_direct_pf_lf(src_ptrs: Sequence[torch.Tensor], dst_ptrs: Sequence[torch.Tensor],
                                       src_indices: torch.Tensor, dst_indices: torch.Tensor,
                                       layer_id: int, page_size: int) -> None:
    """Load one layer from a page-first host buffer ``[pages, layers, page, heads, dim]``."""
    pages = src_indices.to(torch.long)[::page_size] // page_size
    dst_idx = dst_indices.to(torch.long)
    for src, dst in zip(src_ptrs, dst_ptrs):
        rows = src[pages.to(src.device), layer_id].reshape(-1, *src.shape[3:])
        dst[dst_idx.to(dst.device)] = rows.to(dst.device).view(-1, *dst.shape[1:])


def transfer_kv_all_layer_direct_lf_pf(src_ptrs: Sequence[torch.Tensor], dst_ptrs: Sequence[torch.Tensor],
                                       src_indices: torch.Tensor, dst_indices: torch.Tensor,
                                       page_size: int) -> None:
    """Back up every layer (K layers then V layers in ``src_ptrs``) into page-first host buffers."""
    pages = dst_indices.to(torch.long)[::page_size] // page_size
    src_idx = src_indices.to(torch.long)
    num_layers = len(src_ptrs) // len(dst_ptrs)
    for kind, dst in enumerate(dst_ptrs):
        for layer in range(num_layers):
            src = src_ptrs[kind * num_layers + layer]
            rows = src[src_idx.to(src.device)].to(dst.device)
            dst[pages.to(dst.device), layer] = rows.view(len(pages), page_size, *dst.shape[3:])


def _bind_transfer_ops() -> None:
    for name in _POOL_MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        for fn in (transfer_kv_direct, transfer_kv_per_layer_direct_pf_lf, transfer_kv_all_layer_direct_lf_pf):
            if not callable(module.__dict__.get(fn.__name__)):
                setattr(module, fn.__name__, fn)


def _host_pool_init_on_cpu(*args, **kwargs):
    """BEFORE hook on ``HostKVCache.__init__``: unpinned host memory and torch transfer ops."""
    if torch.cuda.is_available():
        return None
    kwargs["pin_memory"] = False
    _bind_transfer_ops()
    return args, kwargs


def register_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register("sglang.srt.mem_cache.pool_host.base.HostKVCache.__init__",
                          _host_pool_init_on_cpu, HookType.BEFORE)
