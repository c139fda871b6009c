"""No key in an instance's log: SGLang logs its server args at start, ``api_key`` and
``admin_api_key`` among them; the launcher passes both keys to every instance it starts."""

from __future__ import annotations

TARGET = "sglang.srt.entrypoints.engine._server_args_for_logging"
SECRET_FIELDS = ("api_key", "admin_api_key")


def redact_keys(result, *args, **kwargs):
    """AFTER hook: the logged server args with every key field replaced."""
    if isinstance(result, dict):
        return {k: ("<redacted>" if k in SECRET_FIELDS and v else v) for k, v in result.items()}
    return result


def register_hooks() -> None:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, redact_keys, HookType.AFTER)
