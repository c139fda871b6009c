"""Which plain SGLang a rollout run is measured against, and the bounds that say what any mode could reach.

A speed-up is only as good as the baseline under it. A trainer does not feed plain SGLang one way:
veRL's agent loop sends each prompt group whole to one instance (``plain-group``), slime sends one
``/generate`` per sample through sglang-router, which places it by prefix (``plain-router``, the
router's ``cache_aware`` policy) or by load (``plain-router-p2``, ``power_of_two``). A run measures
every plain mode it is given on the same instances, and its ratios are against the fastest of them
(its ``reference``): a seer mode is credited only with what it gains over the strongest plain SGLang
of that run. The ratios against the other plain modes are kept beside (``ratios_by_baseline``).

The critical-path bound is the other side: no scheduler ends a rollout before its longest sample has
written its tokens at the fastest step the engine has, so ``bound.critical_path_s`` says how much of a
completion time is the workload's and how much a schedule could still win. The regime says whether a
run can show a scheduler's gains at all: where a full batch's step is under twice a lone request's
(``full_over_idle`` < 2) a long tail costs little, and balancing it can win little.

Pure functions over result dicts and a step model: the unit tests run them without an engine.
"""

from __future__ import annotations

import math

PLAIN_GROUP = "plain-group"
# One request per sample, the instances in turn: how a least-requests balancer (veRL's agent loop)
# places a rollout's burst, every request arriving before any finishes.
PLAIN_SAMPLE = "plain-sample"
# plain mode -> sglang-router's policy
ROUTER_POLICIES = {"plain-router": "cache_aware", "plain-router-p2": "power_of_two"}
PLAIN_MODES = (PLAIN_GROUP, PLAIN_SAMPLE, *ROUTER_POLICIES)
# names stored configs used: ``--modes baseline,...`` still rebuilds as plain-group
ALIASES = {"baseline": PLAIN_GROUP}
FULL_OVER_IDLE_MIN = 2.0


def canonical(mode: str) -> str:
    """A mode's name in results (``baseline`` -> ``plain-group``)."""
    return ALIASES.get(mode, mode)


def is_plain(mode: str) -> bool:
    """Whether a mode is plain SGLang, under its current or its stored (``baseline``) name."""
    return canonical(mode) in PLAIN_MODES


def pooled_throughput(result: dict) -> float:
    """A mode's throughput over all its repeats: total output tokens over total completion time."""
    reps = result["repeats"]
    return sum(r["output_tokens"] for r in reps) / sum(r["completion_s"] for r in reps)


def reference(results: dict) -> str | None:
    """The plain mode with the highest throughput in the run (None without a plain mode)."""
    plain = [m for m in results if is_plain(m)]
    return max(plain, key=lambda m: pooled_throughput(results[m])) if plain else None


def ratios_against(results: dict, base_mode: str) -> dict:
    """Each mode against ``base_mode`` over the same repeats: throughput as total tokens over total time
    (repeat r of every mode ran the same workload), the tail and completion as ratios of their means;
    ``per_repeat`` holds the throughput ratio of each repeat's workload."""
    base = results[base_mode]
    out = {}
    for m, r in results.items():
        pairs = list(zip(base["repeats"], r["repeats"]))
        out[m] = {"throughput": (sum(p["output_tokens"] for _, p in pairs) / sum(p["completion_s"] for _, p in pairs))
                  / (sum(b["output_tokens"] for b, _ in pairs) / sum(b["completion_s"] for b, _ in pairs)),
                  "tail": r["tail_s"] / base["tail_s"] if base["tail_s"] else None,
                  "completion": r["completion_s"] / base["completion_s"],
                  "per_repeat": [b["completion_s"] / p["completion_s"] for b, p in pairs]}
    return out


def ratio_keys(results: dict) -> dict:
    """``reference``, ``ratios`` against it and ``ratios_by_baseline`` (every plain mode -> ratios).
    A run without a plain mode takes its first mode as the reference, as runs always have."""
    ref = reference(results) or next(iter(results))
    return {"reference": ref, "ratios": ratios_against(results, ref),
            "ratios_by_baseline": {p: ratios_against(results, p) for p in results if is_plain(p)}}


def reference_of(run: dict) -> str:
    """The mode a stored run's ``ratios`` are against: its ``reference``, else (runs before it was
    named) plain SGLang's ``baseline``, else the first mode."""
    if run.get("reference"):
        return run["reference"]
    return "baseline" if "baseline" in run["modes"] else next(iter(run["modes"]))


def critical_path_s(longest_tokens: int, step_s: float, tokens_per_step: float = 1.0) -> float:
    """The longest sample's tokens at the smallest step time, ``tokens_per_step`` tokens a step (the
    mean acceptance length with speculation, 1 without): no schedule ends the rollout sooner."""
    return longest_tokens * step_s / max(tokens_per_step, 1.0)


def bound(results: dict, step_s: float, ref: str, source: str) -> dict:
    """The critical-path bound of the run (no speculation) and of each mode (its own acceptance), with
    the share of the completion time it explains: near 1, the longest sample alone sets the time."""
    longest = max(max(r.get("longest_tokens", 0) for r in m["repeats"]) for m in results.values())
    by_mode = {}
    for m, r in results.items():
        per_step = r.get("mean_acceptance_length") or 1.0
        cp = critical_path_s(longest, step_s, per_step)
        by_mode[m] = {"critical_path_s": cp, "tokens_per_step": per_step, "share": cp / r["completion_s"]}
    cp = critical_path_s(longest, step_s)
    return {"critical_path_s": cp, "longest_tokens": longest, "step_s": step_s, "step_source": source,
            "share": cp / results[ref]["completion_s"], "share_of": ref, "by_mode": by_mode}


def regime(model, samples: int, instances: int, prompt_tokens: float, mean_output: float,
           longest_output: int) -> dict:
    """Where the run sits on the step model: ``requests_per_step``, the batch a loaded instance runs
    (its share of the samples, as many as its KV holds at their full length); ``fixed_share``, the part
    of that full step that does not grow with the KV read or compute; ``full_over_idle``, the full step
    over a lone request's step at the longest sample's length: what a request in the tail saves by
    running alone. Below 2 a long tail costs little, so the run cannot show what balancing it gains."""
    per_sample = prompt_tokens + mean_output
    share = math.ceil(samples / instances)
    batch = max(1, min(share, int(model.capacity_tokens // per_sample) if model.capacity_tokens else share))
    longest = int(prompt_tokens + longest_output)
    full = model.decode_step(batch, int(batch * (prompt_tokens + mean_output / 2)), longest=longest)
    idle = model.decode_step(1, longest, longest=longest)
    out = {"requests_per_step": batch, "fixed_share": model.fixed_s(batch) / full, "full_step_s": full,
           "idle_step_s": idle, "full_over_idle": full / idle, "step_model": model.name}
    if out["full_over_idle"] < FULL_OVER_IDLE_MIN:
        out["note"] = (f"full_over_idle {out['full_over_idle']:.2f} < {FULL_OVER_IDLE_MIN:g}: a full batch's step "
                       "costs under twice a lone request's, so a long tail costs little and the run cannot show "
                       "what balancing it gains")
    return out
