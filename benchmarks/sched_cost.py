"""Cost of one scheduling decision with many active requests (pure policy, no engines).

    python -m benchmarks.sched_cost --active 10000 --instances 8 --out benchmarks/results/sched_cost.json

Half the groups have a finished sibling (so estimates differ), the rest wait on their probes; each
``schedule()`` call sees every pending sample and places chunks until the instances are full.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

from benchmarks.harness.result import start as start_run
from seer_sglang.core.buffer import RequestBuffer
from seer_sglang.core.policy import InstanceView, make_policy
from seer_sglang.core.request import Group, SamplingParams


def build(active: int, group_size: int, seed: int) -> tuple[RequestBuffer, list[Group]]:
    rng = random.Random(seed)
    buf, groups = RequestBuffer(), []
    for g in range(active // group_size):
        group = Group.make(f"g{g}", [1] * rng.randint(50, 500), group_size, SamplingParams(max_new_tokens=8192))
        for s in group.samples:
            s.output_ids = [0] * rng.randint(0, 4000)
        buf.add_group(group)
        groups.append(group)
    return buf, groups


def measure(policy_name: str, active: int, instances: int, group_size: int, repeats: int, seed: int) -> dict:
    buf, groups = build(active, group_size, seed)
    policy = make_policy(policy_name, chunk_size=512)
    for group in groups[::2]:  # half the groups have a finished sibling
        policy.on_sample_finished(group.samples[-1])
    call_us, placed = [], []
    for _ in range(repeats):
        # Each instance has room for a handful of chunks, as after a few chunks come back.
        views = [InstanceView(i, capacity_tokens=200_000, reserved_tokens=170_000, inflight=64)
                 for i in range(instances)]
        t0 = time.perf_counter()
        decisions = policy.schedule(buf, views)
        call_us.append((time.perf_counter() - t0) * 1e6)
        placed.append(sum(len(d.samples) for d in decisions))
    median = statistics.median(call_us)
    return {"policy": policy_name, "active_requests": active, "instances": instances,
            "median_us_per_call": median, "p90_us_per_call": sorted(call_us)[int(0.9 * len(call_us))],
            "chunks_placed_per_call": statistics.median(placed),
            "median_us_per_placed_chunk": median / max(1, statistics.median(placed))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--active", type=int, default=10_000)
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    run = start_run("sched_cost", args.out) if args.out else None
    rows = [measure(name, args.active, args.instances, args.group_size, args.repeats, args.seed)
            for name in ("divided", "context", "oracle")]
    result = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
              "python": platform.python_version(), "results": rows}
    for r in rows:
        print(f"{r['policy']:>8}: {r['median_us_per_call']:9.0f} us per schedule() call over {r['active_requests']} "
              f"active requests, {r['chunks_placed_per_call']:.0f} chunks placed "
              f"({r['median_us_per_placed_chunk']:.0f} us per chunk)")
    if run:
        run.write(result)


if __name__ == "__main__":
    main()
