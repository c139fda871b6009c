"""The simulator's held-out configurations: emulated runs that no simulator change is tuned on.

Every emulated rollout run checks the simulator against itself (``sim_check``), but the runs the
simulator was corrected on are in-sample: a fix made to close one run's gap is bound to close it.
These configurations are fixed here, before any run of them: other seeds than any tuned run, other
instance counts, every workload shape, at Seer's load (each instance the profile's own KV). Their
checks are reported apart from the in-sample runs (``benchmarks.sim_heldout``, the ``sim_errors``
table), and a simulator change is judged on them without being fitted to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.harness.emulation import is_invalid, mode_runs

# the modes a held-out run measures: the plain baselines the simulator models and seer's policies
HELD_OUT_MODES = "plain-group,plain-router,plain-router-p2,divided,context,oracle"
LABEL_PREFIX = "heldout_"


@dataclass(frozen=True)
class HeldOut:
    """One held-out configuration: the ``benchmarks.rollout`` arguments that differ between them."""

    name: str
    workload: str
    instances: int
    prompts: int
    seed: int
    max_tokens: int = 128
    chunk_size: int = 16
    time_scale: float = 20.0
    profile: str = "h100-70b"

    @property
    def label(self) -> str:
        return f"{LABEL_PREFIX}{self.name}"

    def args(self) -> list[str]:
        """``python -m benchmarks.rollout`` arguments of this configuration (one repeat of each mode)."""
        return ["--modes", HELD_OUT_MODES, "--workload", self.workload, "--instances", str(self.instances),
                "--prompts", str(self.prompts), "--seed", str(self.seed), "--max-tokens", str(self.max_tokens),
                "--chunk-size", str(self.chunk_size), "--kv-share", "0", "--repeats", "1",
                "--emulate", self.profile, "--emulate-time-scale", f"{self.time_scale:g}", "--model", "tiny"]


# Seeds 9001-9003 appear in no other run; 8 groups per instance (Seer's load), every workload shape, the
# MoE shape on the MoE profile.
HELD_OUT = (
    HeldOut("qwen2vl_3x24", "qwen2vl", instances=3, prompts=24, seed=9001),
    HeldOut("moonlight_2x16", "moonlight", instances=2, prompts=16, seed=9002),
    HeldOut("kimik2_4x32", "kimik2", instances=4, prompts=32, seed=9003, profile="moe-kimi-k2"),
)


def is_held_out(label: str) -> bool:
    return label.startswith(LABEL_PREFIX)


def checks(runs: list[tuple[str, dict]]) -> list[dict]:
    """One row per mode of each held-out run (label, result): the simulator's error, whether the mode
    counts (its steps kept up with the profile), and whether a random placement was checked on the draw
    the run recorded."""
    rows = []
    for label, result in runs:
        for mode, check in result.get("sim_check", {}).items():
            rows.append({"run": label, "mode": mode, "error": check["error"],
                         "valid": not is_invalid(mode_runs(result, mode)),
                         "recorded_placement": check.get("placement") == "recorded"})
    return rows
