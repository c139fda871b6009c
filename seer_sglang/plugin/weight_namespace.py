"""Every cached KV page is keyed by the weight version that computed it.

SGLang namespaces its radix cache and its storage page hashes by a request's ``extra_key``. This hook
appends the scheduler's weight version to it when a request arrives, the same place SGLang adds its
own namespaces. A request runs on one version (SGLang updates weights only when no request is in
flight), so its pages are written under that version's key, and a request on other weights can never
match them: not in the device cache, not in the host tier, not in the shared pool, even in a race
with an update. The frontend probes the pool with the same key (``wire.weight_namespace``).
"""

from __future__ import annotations

from ..wire import weight_namespace

TARGET = "sglang.srt.managers.scheduler.Scheduler._maybe_namespace_elastic_radix_cache"


def namespace_by_weight_version(result, scheduler, req, *args, **kwargs):
    """AFTER hook: ``req.extra_key`` gains ``weight_version=<version>``."""
    from sglang.srt.runtime_context import get_serving

    ours = weight_namespace(get_serving().weight_version)
    req.extra_key = f"{req.extra_key}|{ours}" if req.extra_key else ours
    return result


def register_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, namespace_by_weight_version, HookType.AFTER)
