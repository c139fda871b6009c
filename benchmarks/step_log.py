"""Each emulated instance's steps in a run, against the simulator's instances on the same workload.

    python -m benchmarks.rollout --emulate h100-70b ... --emulate-step-log /tmp/steps/run --out RUN.json
    python -m benchmarks.step_log RUN.json /tmp/steps/run

``--emulate-step-log`` makes every instance write one JSON line per forward step (``plugin.emulation``).
For each mode's measured rollouts this prints, per instance, the span from its first step to its last,
its decode and prefill steps with their modelled time, and the requests it prefilled again after a
retraction; for the seer modes also how long a chunk's continuation took to start after the chunk's
last step. Next to them, the simulator's busy time per instance (plain SGLang: the instance that ran
the same groups). A run that the simulator misses shows here which instance, and from which step.
With speculation it prints the tokens committed per request-step by where the step falls in its
chunk, for the instances and the simulator; and how the rollout's requests spread as they reached
their queues (the log's ``arrive`` lines).
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import statistics
from collections import defaultdict

from benchmarks.harness.baselines import is_plain
from benchmarks.harness.manifest import load_run
from benchmarks.harness.workload import BASELINE_RID
from seer_sglang.wire import parse_chunk_rid


def load(prefix: str) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """Each instance's steps and the requests reaching its queue (file name -> records in time order),
    from one read of its log."""
    steps, arrivals = {}, {}
    for path in sorted(glob.glob(f"{prefix}.*")):
        with open(path) as f:
            records = sorted((json.loads(line) for line in f if line.strip()), key=lambda r: r["t"])
        steps[path] = [r for r in records if r["kind"] != "arrive"]
        arrivals[path] = [r for r in records if r["kind"] == "arrive"]
    return steps, arrivals


def arrival_offsets(arrivals: dict[str, list[dict]], rollout: dict[str, list[dict]]) -> list[float]:
    """When each of a rollout's requests reached its instance's queue, from the first of them (a
    request's last arrival before its first step: the warm-up sends the same rids)."""
    first_step = {}
    for path, steps in rollout.items():
        for s in steps:
            for rid in s["rids"]:
                first_step.setdefault(rid, s["t"] - s.get("model_s", 0.0))
    times = {}
    for records in arrivals.values():
        for r in records:
            rid = r["rids"][0]
            if rid in first_step and r["t"] <= first_step[rid]:
                times[rid] = r["t"]
    start = min(times.values(), default=0.0)
    return sorted(t - start for t in times.values())


def rollout_of(rid: str) -> str | None:
    """``baseline`` for plain SGLang's requests, the ``<tag><mode>`` of a seer chunk, None for the rest
    (warm-up and calibration requests)."""
    if BASELINE_RID.match(rid):
        return "baseline"
    chunk = parse_chunk_rid(rid)
    if chunk is None:
        return None
    tag_mode = chunk.group.rsplit("-", 1)[0]
    return tag_mode if re.match(r"^r\d+-", tag_mode) else None


def rollouts(logs: dict[str, list[dict]], baseline_rollouts: int = 1) -> dict[str, list[dict[str, list[dict]]]]:
    """The steps of each rollout, per instance: ``r<k>-<mode>`` -> that one rollout; ``baseline`` -> its
    ``baseline_rollouts`` rollouts in time order (the warm-up sends the same rids as the measured
    ones), split where every instance was idle longest."""
    keyed: dict[str, list[tuple[str, dict]]] = defaultdict(list)
    for path, steps in logs.items():
        for step in steps:
            keys = {rollout_of(rid) for rid in step["rids"]} - {None}
            if len(keys) == 1:
                keyed[keys.pop()].append((path, step))
    out = {}
    for key, tagged in keyed.items():
        tagged.sort(key=lambda item: item[1]["t"])
        count = baseline_rollouts if key == "baseline" else 1
        gaps = sorted(range(1, len(tagged)), key=lambda k: tagged[k][1]["t"] - tagged[k][1]["model_s"]
                      - tagged[k - 1][1]["t"])[len(tagged) - count:] if count > 1 else []
        cuts = [0, *sorted(gaps), len(tagged)]
        segments = []
        for a, b in zip(cuts, cuts[1:]):
            segment = defaultdict(list)
            for path, step in tagged[a:b]:
                segment[path].append(step)
            segments.append(dict(segment))
        out[key] = segments
    return out


def instance_stats(steps: list[dict]) -> dict:
    """One instance's part of a rollout. A request prefilled a second time was retracted in between (a
    continuation is another rid, so only a retraction brings the same rid back to a prefill)."""
    decode = [s for s in steps if s["kind"] != "prefill"]
    prefill = [s for s in steps if s["kind"] == "prefill"]
    seen, again = set(), 0
    for s in prefill:
        for rid in s["rids"]:
            again += rid in seen
            seen.add(rid)
    return {"span_s": steps[-1]["t"] - (steps[0]["t"] - steps[0]["model_s"]),
            "decode_steps": len(decode), "decode_model_s": sum(s["model_s"] for s in decode),
            "request_steps": sum(len(s["rids"]) for s in decode),
            "verify_steps": sum(1 for s in decode if s["kind"] == "verify"),
            "prefill_steps": len(prefill), "prefill_model_s": sum(s["model_s"] for s in prefill),
            "prefilled_again": again, "late_steps": sum(1 for s in steps if s["late_s"] > 0)}


def continuation_gaps(segment: dict[str, list[dict]]) -> list[float]:
    """Seconds from a chunk's last step to the start of its continuation's first step, any instance."""
    last, first = {}, {}
    for steps in segment.values():
        for s in steps:
            for rid in s["rids"]:
                chunk = parse_chunk_rid(rid)
                if chunk is not None:
                    last[(chunk.sample, chunk.chunk)] = s["t"]
                    first.setdefault((chunk.sample, chunk.chunk), s["t"] - s["model_s"])
    return sorted(first[(sample, c + 1)] - t for (sample, c), t in last.items() if (sample, c + 1) in first)


def committed_by_chunk_step(segment: dict[str, list[dict]]) -> dict[str, list[int]]:
    """Tokens each request committed per decode or verify step (the next step's length of it less this
    one's, on the same instance with no prefill of it between), by where the step falls: a chunk's
    first decode step on its instance or a later one, and whether the chunk's sample came from another
    instance (``moved``), stayed (``stayed``) or starts there (``first``). Speculation's acceptance is
    told apart this way from what a move costs it (an instance's drafter must fetch the group first)."""
    where: dict[tuple[str, int], str] = {}
    for path, steps in segment.items():
        for s in steps:
            for rid in s["rids"]:
                chunk = parse_chunk_rid(rid)
                if chunk is not None:
                    where.setdefault((chunk.sample, chunk.chunk), path)
    out: dict[str, list[int]] = defaultdict(list)
    for path, steps in segment.items():
        last: dict[str, int] = {}  # rid -> its length at its last decode step here
        nth: dict[str, int] = defaultdict(int)  # rid -> its decode steps here so far
        for s in steps:
            if s["kind"] == "prefill" or "lens" not in s:
                for rid in s["rids"]:
                    last.pop(rid, None)
                continue
            for rid, length in zip(s["rids"], s["lens"]):
                chunk = parse_chunk_rid(rid)
                if chunk is None:
                    continue
                if rid in last:
                    came = ("first" if chunk.chunk == 0 else
                            "stayed" if where.get((chunk.sample, chunk.chunk - 1)) == path else "moved")
                    out[f"{came}, step {'1' if nth[rid] == 1 else '2+'}"].append(length - last[rid])
                last[rid] = length
                nth[rid] += 1
    return dict(out)


def simulated(run: dict, mode: str):
    """The simulator's run of ``mode`` on the run's first workload (``SimResult``), with the run's
    acceptance for a speculative mode, as ``benchmarks.rollout``'s check has it."""
    from benchmarks.harness.simulate import mode_drafter, rebuild, run_acceptance, simulate_mode
    from benchmarks.harness.workload import workload_seeds

    args = argparse.Namespace(**run["config"])
    seeds = workload_seeds(args)
    traces, model, rule = rebuild(run["config"], seeds)
    spec = run_acceptance(args, seeds[0]) if mode_drafter(mode) and args.sim_acceptance else None
    return simulate_mode(mode, traces[0], model, rule, args, spec)


def baseline_instance(steps: list[dict], instances: int) -> int | None:
    """The instance plain SGLang's round-robin gave these steps' groups."""
    for s in steps:
        for rid in s["rids"]:
            match = BASELINE_RID.match(rid)
            if match:
                return int(match["group"]) % instances
    return None


def report(run: dict, logs: dict[str, list[dict]], arrivals: dict[str, list[dict]] | None = None) -> None:
    config = run["config"]
    instances, repeats = config["instances"], config["repeats"]
    found = rollouts(logs, repeats + (1 if config.get("warmup_prompts") != 0 else 0))
    plain = [m for m in run["modes"] if is_plain(m)]
    for mode in run["modes"]:
        if is_plain(mode) and len(plain) > 1:
            # every plain mode sends the same rids, one after another on the same instances
            print(f"{mode}: not told apart from the run's other plain modes ({', '.join(plain)}) in the step logs")
            continue
        if is_plain(mode):
            segments = found.get("baseline", [])[-repeats:]
        else:
            segments = [found[k][0] for k in sorted(found) if k != "baseline" and k.split("-", 1)[1] == mode]
        if not segments:
            print(f"{mode}: no steps logged")
            continue
        sim = simulated(run, mode)
        busy = sim.busy_s
        print(f"== {mode}: {len(segments)} rollout(s) logged; the simulator's busy time per instance: "
              + ", ".join(f"{b:.1f}" for b in busy))
        for k, segment in enumerate(segments):
            print(f"  rollout {k + 1}")
            rows = []
            for path, steps in segment.items():
                index = baseline_instance(steps, instances) if mode in ("baseline", "plain-group") else None
                rows.append((index if index is not None else path, instance_stats(steps)))
            for name, st in sorted(rows, key=lambda r: str(r[0])):
                mine = f" (simulator {busy[name]:.1f} s)" if isinstance(name, int) else ""
                print(f"    {name}: span {st['span_s']:.1f} s{mine}, {st['decode_steps']} decode steps "
                      f"({st['decode_model_s']:.1f} s, mean batch {st['request_steps'] / max(1, st['decode_steps']):.1f}), "
                      f"{st['prefill_steps']} prefills ({st['prefill_model_s']:.1f} s), "
                      f"{st['prefilled_again']} prefilled again, {st['late_steps']} steps late")
            real = [st for _, st in rows]
            print(f"    all instances: {sum(r['decode_steps'] for r in real)} decode steps "
                  f"({sum(r['verify_steps'] for r in real)} of them with drafts) over "
                  f"{sum(r['request_steps'] for r in real)} requests; the simulator {sum(sim.decode_steps)} over "
                  f"{sum(sim.request_steps)}")
            committed = committed_by_chunk_step(segment)
            for who, per_step in (("", committed), ("the simulator's ", sim.committed if committed else {})):
                if per_step:
                    print(f"    {who}tokens committed per request-step: " + ", ".join(
                        f"{key} {statistics.mean(v):.2f} ({len(v)})" for key, v in sorted(per_step.items()) if v))
            offsets = arrival_offsets(arrivals, segment) if arrivals else []
            if offsets:
                print(f"    requests reaching their queues: {len(offsets)} over {offsets[-1]:.2f} s (median "
                      f"{statistics.median(offsets):.2f} s, p90 {offsets[int(0.9 * (len(offsets) - 1))]:.2f} s)")
            gaps = continuation_gaps(segment)
            if gaps:
                print(f"    continuations: {len(gaps)}, start after the chunk's last step: median "
                      f"{statistics.median(gaps):.2f} s, p90 {gaps[int(0.9 * len(gaps))]:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="the benchmarks.rollout --emulate run (its folder or result file)")
    ap.add_argument("prefix", help="the run's --emulate-step-log PREFIX")
    args = ap.parse_args()
    run = load_run(args.run)
    report(run, *load(args.prefix))


if __name__ == "__main__":
    main()
