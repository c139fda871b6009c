"""seer_sglang: fast, exactly on-policy rollouts for synchronous RL on SGLang."""

__version__ = "0.1.0"
