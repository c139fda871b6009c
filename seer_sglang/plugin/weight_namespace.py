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
"""

from __future__ import annotations

from ..wire import weight_namespace

TARGET = "sglang.srt.managers.scheduler.Scheduler._maybe_namespace_elastic_radix_cache"
VERSION_CHANGE = "sglang.srt.managers.scheduler.Scheduler.record_weight_version_change"


def namespace_by_weight_version(result, scheduler, req, *args, **kwargs):
    """AFTER hook: ``req.extra_key`` gains ``weight_version=<version>``."""
    from sglang.srt.runtime_context import get_serving

    req.extra_key = rekey(req.extra_key, get_serving().weight_version)
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
