"""Step emulation for the instances the launcher starts (``--emulate``; see ``plugin/emulation.py``)."""

from __future__ import annotations

from ..config import EmulationConfig
from ..core import step_model
from ..core.step_model import Admission, StepModel


def emulated_model(config: EmulationConfig) -> StepModel | None:
    """The model every instance pads its steps to (None without ``--emulate``); a bad profile fails here,
    before any instance starts."""
    return step_model.emulated_model(config.profile, config.length_scale, config.time_scale)


def plugin_settings(config: EmulationConfig) -> dict:
    """The plugin's part of the config (``config.PluginConfig``) that emulation sets."""
    if not config.profile:
        return {}
    return {"emulate": config.profile, "emulate_time_scale": config.time_scale,
            "emulate_length_scale": config.length_scale, "emulate_step_log": config.step_log}


def admission(config: EmulationConfig) -> Admission:
    """SGLang's admission rule scaled like the lengths (the simulator runs the same)."""
    return Admission().scaled(config.length_scale)


def instance_env(config: EmulationConfig) -> dict[str, str]:
    """The SGLang environment of an emulated instance: its admission counts tokens and steps in the
    workload's scale."""
    return admission(config).sglang_env() if config.profile else {}


def instance_args(config: EmulationConfig, sglang_args: list[str]) -> list[str]:
    """An emulated instance holds the profile's KV tokens (scaled like the lengths) and runs at most
    its batch, unless the SGLang flags say otherwise."""
    model = emulated_model(config)
    if model is None:
        return []
    args = []
    if "--max-total-tokens" not in sglang_args:
        args += ["--max-total-tokens", str(model.capacity_tokens)]
    if "--max-running-requests" not in sglang_args:
        args += ["--max-running-requests", str(model.max_running)]
    return args
