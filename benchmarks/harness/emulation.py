"""An emulated run's step counters and whether they make it a result: an instance pads each forward step
to a profile, and a mode whose host fell behind the profile on too many steps measured the host.
"""

from __future__ import annotations

import httpx

from seer_sglang.core.step_model import StepModel, emulated_model
from seer_sglang.sim.workload import PRESETS


def emulation_counters(urls: list[str]) -> list[dict]:
    """Each instance's step-emulation counters (``/server_info``), to take differences around a run."""
    return [httpx.get(f"{u}/server_info", timeout=30).json()["internal_states"][0].get("seer_emulation", {})
            for u in urls]


def emulation_delta(before: list[dict], after: list[dict]) -> dict:
    steps = sum(a.get("steps", 0) - b.get("steps", 0) for a, b in zip(after, before))
    overruns = sum(a.get("overruns", 0) - b.get("overruns", 0) for a, b in zip(after, before))
    lost = sum(a.get("lost_s", 0.0) - b.get("lost_s", 0.0) for a, b in zip(after, before))
    kinds: dict[str, dict] = {}
    for a, b in zip(after, before):
        for kind, entry in a.get("kinds", {}).items():
            was = b.get("kinds", {}).get(kind, {})
            total = kinds.setdefault(kind, {"steps": 0, "model_s": 0.0, "host_s": 0.0})
            for key in total:
                total[key] += entry[key] - was.get(key, 0)
    return {"steps": steps, "overruns": overruns, "overrun_share": overruns / steps if steps else 0.0,
            "lost_s": lost, "max_overrun_s": max((a.get("max_overrun_s", 0.0) for a in after), default=0.0),
            "kinds": kinds}


def emulation_settings(args) -> tuple[StepModel | None, float]:
    """The emulated model of every instance, and the workload's length scale."""
    if not args.emulate:
        return None, 1.0
    scale = args.emulate_length_scale or args.max_tokens / PRESETS[args.workload].max_tokens
    return emulated_model(args.emulate, scale, args.emulate_time_scale), scale


MAX_OVERRUN_SHARE = 0.05  # a mode whose worst repeat overran more of its steps measured the host


def worst_overrun(runs: list[dict]) -> float:
    """The worst repeat's share of steps that overran the emulated profile (0 without repeats)."""
    return max((r["overrun_share"] for r in runs), default=0.0)


def is_invalid(runs: list[dict]) -> bool:
    """Whether a mode's worst repeat overran the profile on more than 5% of its steps: it measured the
    host, not the profile, so no figure of it is a result."""
    return worst_overrun(runs) > MAX_OVERRUN_SHARE


def mode_runs(run: dict, mode: str) -> list[dict]:
    """The emulation's counters of each repeat of ``mode`` (none for a run not emulated)."""
    return run.get("emulation", {}).get("per_mode", {}).get(mode, [])


def schedule_bound(run: dict, mode: str) -> dict | None:
    """How much of ``mode``'s rollout its instances spent in steps, from the profile's step times the
    emulation padded to (every repeat pooled): ``work_s``, the steps' time per instance; ``completion_s``;
    and ``bound``, their ratio: the most a dispatch order that left no instance idle could gain over
    ``mode`` with the same steps. Only a change of the steps themselves (fewer, or cheaper: speculation,
    other batches) goes further. None for a run not emulated."""
    runs = mode_runs(run, mode)
    repeats = run["modes"][mode].get("repeats") or []
    if not runs or len(runs) != len(repeats):
        return None
    n = run["config"]["instances"]
    work = sum(sum(k["model_s"] for k in r.get("kinds", {}).values()) for r in runs) / n
    completion = sum(r["completion_s"] for r in repeats)
    if work <= 0:
        return None
    return {"work_s": work / len(runs), "completion_s": completion / len(runs), "bound": completion / work}
