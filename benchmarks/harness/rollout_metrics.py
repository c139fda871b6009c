"""One rollout's figures from its finish times and timeline, a mode's summary over its repeats, and the
samples that ended a seer rollout: what ``benchmarks.rollout`` stores per mode."""

from __future__ import annotations

import statistics


LAST_SAMPLES = 3


def last_samples(samples: list[dict], start: float) -> list[dict]:
    """The samples that ended the rollout, chunk by chunk (times from the rollout's start): where the
    simulator misses a completion time, it misses these samples, and their chunks say why."""
    ends = sorted(samples, key=lambda s: s["timing"]["submitted_at"] + s["timing"]["latency_s"])[-LAST_SAMPLES:]
    return [{"rid": s["rid"], "tokens": s["completion_tokens"], "spec": s["spec"],
             "end_s": s["timing"]["submitted_at"] + s["timing"]["latency_s"] - start,
             "chunks": [{"instance": c["instance"], "start_s": c["start"] - start,
                         "end_s": None if c["end"] is None else c["end"] - start, "tokens": c["tokens"],
                         "spec": c.get("spec")} for c in s["chunks"]]} for s in ends]


def idle_shares(run: dict, instances: int, completion: float) -> list[float | None]:
    """Per instance: the share of the rollout's time it ran nothing (telemetry points with no running request)."""
    out = []
    for i in range(instances):
        pts = [p for p in run["timeline"] if p["instance"] == i and 0 <= p["t"] - run["start"] <= completion]
        out.append(sum(1 for p in pts if p["running"] == 0) / len(pts) if len(pts) > 1 else None)
    return out


def metrics(run: dict, instances: int, calib: dict) -> dict:
    """One rollout's figures. ``retractions`` is the instances' own counter over the rollout where
    every instance gave it (``retractions_source`` says which); ``retractions_reported`` is what the
    answers report of themselves, kept beside to compare. ``retracted_tokens`` is the prompt and
    output tokens of the requests retracted, from the instances' counters: what readmitting them
    prefills again, less what the radix cache still held (runs recorded before it was counted lack it)."""
    ends = sorted(f["t"] - run["start"] for f in run["finish"])
    completion = ends[-1]
    tokens = sum(f["tokens"] for f in run["finish"])
    p90 = ends[max(0, int(0.9 * len(ends)) - 1)]
    idle = idle_shares(run, instances, completion)
    known = [x for x in idle if x is not None]
    longest = max(f["tokens"] for f in run["finish"])
    bound = max(tokens / calib["peak_tok_s"], longest * calib["min_step_s"])
    reported = sum(f["retractions"] for f in run["finish"])
    counter = run.get("retraction_counter") or {}
    counted = counter.get("total")
    forced = [f["tokens"] == f["target"] for f in run["finish"] if f["target"] is not None]
    return {"completion_s": completion, "throughput_tok_s": tokens / completion, "tail_s": completion - p90,
            "idle_share": idle, "idle_s_per_instance": statistics.mean(known) * completion if known else None,
            "retractions": reported if counted is None else counted, "retractions_reported": reported,
            "retractions_source": "reported by the answers" if counted is None else "instances' counter " +
            "(sglang:num_retracted_requests_total)",
            **({"retractions_per_instance": counter["per_instance"]} if counted is not None else {}),
            **({"retracted_tokens": counter["recomputed_tokens"]}
               if counter.get("recomputed_tokens") is not None else {}),
            **({"on_target_share": sum(forced) / len(forced)} if forced else {}),
            "samples": len(ends), "longest_tokens": longest, "output_tokens": tokens, "chunks": run.get("chunks"), "lower_bound_s": bound,
            "efficiency": bound / completion, "finish_s": ends, **({"kv": run["kv"]} if run.get("kv") else {}),
            **({"last_samples": run["last_samples"]} if run.get("last_samples") else {}),
            **({"placement": run["placement"]} if run.get("placement") else {}),
            **({"arrivals": run["arrivals"]} if run.get("arrivals") else {}),
            **({"spec": run["spec"], "mean_acceptance_length": run["spec"]["mean_acceptance_length"]}
               if run.get("spec") and run["spec"]["draft_steps"] else {})}


SUMMARISED = ("completion_s", "throughput_tok_s", "tail_s", "retractions", "retracted_tokens", "idle_s_per_instance",
              "efficiency", "mean_acceptance_length")


def summarise(repeats: list[dict]) -> dict:
    """A mode over its repeats: the mean of each figure, its spread (sample std, min, max), the per-instance
    idle shares averaged, and every repeat's own figures."""
    out: dict = {"repeats": [{k: v for k, v in r.items() if k != "finish_s"} for r in repeats],
                 "finish_s": repeats[0]["finish_s"], "spread": {}}
    for key in SUMMARISED:
        values = [r[key] for r in repeats if r.get(key) is not None]
        if not values:
            continue
        out[key] = statistics.mean(values)
        out["spread"][key] = {"std": statistics.stdev(values) if len(values) > 1 else 0.0,
                              "min": min(values), "max": max(values)}
    out["idle_share"] = [statistics.mean(x) if (x := [r["idle_share"][i] for r in repeats
                                                      if r["idle_share"][i] is not None]) else None
                         for i in range(len(repeats[0]["idle_share"]))]
    for key in ("kv", "spec", "chunks", "samples", "output_tokens"):
        if key in repeats[0]:
            out[key] = repeats[0][key]
    return out
