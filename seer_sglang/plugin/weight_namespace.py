"""Every cached KV page is keyed by the weight version that computed it.

SGLang namespaces its radix cache and its storage page hashes by a request's ``extra_key``. This hook
appends the scheduler's weight version to it when a request arrives, the same place SGLang adds its
own namespaces, and moves the requests still waiting to the new version's key when the weights
change under them (SGLang may update weights while requests wait in its queue). So pages are written
under the key of the weights that computed them, and a request on other weights can never match
them: not in the device cache, not in the host tier, not in the shared pool. A request that was
already running when the weights changed keeps its key; SGLang reports it as spanning two versions,
and the frontend generates such a sample again. The frontend probes the pool with the same key
(``wire.weight_namespace``).

A LoRA adapter's weights key its requests' pages too. SGLang appends to their key the id the
instance drew when it loaded the adapter (a fresh one per load), so one adapter has another key on
every instance and a sample moved to another instance never finds its pages in the pool. Here that id
is replaced by a digest of the adapter's weights and config, taken when the instance loads it
(``wire.adapter_namespace``): the same adapter is the same key on every instance, and new weights
under the same name are another key.
"""

from __future__ import annotations

import hashlib
import json

from ..wire import adapter_namespace, weight_namespace

TARGET = "sglang.srt.managers.scheduler.Scheduler._maybe_namespace_elastic_radix_cache"
VERSION_CHANGE = "sglang.srt.managers.scheduler.Scheduler.record_weight_version_change"
_MANAGER = "sglang.srt.lora.lora_manager.LoRAManager"
ADAPTER_LOADS = (f"{_MANAGER}.load_lora_weights", f"{_MANAGER}.load_lora_weights_from_tensors")
ADAPTER_UNLOAD = f"{_MANAGER}.unload_lora_adapter"

# SGLang's lora_id of each adapter this instance holds -> the digest of its weights and config
_adapter_digests: dict[str, str] = {}


def namespace_by_weight_version(result, scheduler, req, *args, **kwargs):
    """AFTER hook: ``req.extra_key`` gains ``weight_version=<version>``, and an adapter's digest in place
    of the instance's own id of it."""
    from sglang.srt.runtime_context import get_serving

    key = keyed_by_adapter(req.extra_key, getattr(req, "lora_id", None), _adapter_digests)
    req.extra_key = rekey(key, get_serving().weight_version)
    return result


def keyed_by_adapter(extra_key: str | None, lora_id: str | None, digests: dict[str, str]) -> str | None:
    """``extra_key`` with the adapter id SGLang's Req appended to it replaced by the adapter's digest
    (as it is where the instance holds no digest of it)."""
    digest = digests.get(lora_id) if lora_id else None
    if digest is None or not extra_key or not extra_key.endswith(lora_id):
        return extra_key
    return f"{extra_key[:-len(lora_id)]}|{adapter_namespace(digest)}"


def adapter_digest(adapter) -> str:
    """A digest of what an adapter computes with (SGLang's ``LoRAAdapter``, weights on the CPU as loaded):
    its config, then every tensor's name, dtype, shape and bytes, in order."""
    import torch

    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(adapter.config.hf_config, sort_keys=True, default=str).encode())
    h.update(json.dumps(getattr(adapter.config, "added_tokens_config", None), sort_keys=True, default=str).encode())
    named = [(f"layer{i}.{name}", t) for i, layer in enumerate(adapter.layers) for name, t in layer.weights.items()]
    named += [(f"embedding.{name}", t) for name, t in adapter.embedding_layers.items()]
    named += [(f"added.{name}", t) for name, t in adapter.added_tokens_embeddings.items()]
    for name, tensor in sorted(named, key=lambda item: item[0]):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def remember_adapter(result, manager, lora_ref, *args, **kwargs):
    """AFTER hook on the LoRA manager's weight loads: the loaded adapter's digest, by SGLang's id."""
    adapter = manager.loras.get(lora_ref.lora_id)
    if adapter is not None:
        _adapter_digests[lora_ref.lora_id] = adapter_digest(adapter)
    return result


def forget_adapter(result, manager, lora_ref, *args, **kwargs):
    _adapter_digests.pop(lora_ref.lora_id, None)
    return result


def rekey(extra_key: str | None, version: str) -> str:
    """``extra_key`` with its weight-version part (added by this module) set to ``version``."""
    ours = weight_namespace(version)
    prefix = weight_namespace("")
    parts = [p for p in (extra_key or "").split("|") if p and not p.startswith(prefix)]
    return "|".join(parts + [ours])


def rekey_waiting_requests(result, scheduler, *args, **kwargs):
    """AFTER hook on the scheduler's weight-version change: requests that have not produced a token
    will run on the new weights, so they look up and write pages under the new version's key."""
    from sglang.srt.runtime_context import get_serving

    version = get_serving().weight_version
    for req in scheduler.waiting_queue:
        if not req.output_ids:
            req.extra_key = rekey(req.extra_key, version)
    return result


def register_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, namespace_by_weight_version, HookType.AFTER)
    HookRegistry.register(VERSION_CHANGE, rekey_waiting_requests, HookType.AFTER)
    for target in ADAPTER_LOADS:
        HookRegistry.register(target, remember_adapter, HookType.AFTER)
    HookRegistry.register(ADAPTER_UNLOAD, forget_adapter, HookType.AFTER)
