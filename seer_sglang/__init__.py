"""seer_sglang: fast, exactly on-policy rollouts for synchronous RL on SGLang."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # ``seer_sglang.Engine`` without importing SGLang for every ``import seer_sglang``.
    if name == "Engine":
        from .engine import Engine

        return Engine
    raise AttributeError(f"module 'seer_sglang' has no attribute {name!r}")
