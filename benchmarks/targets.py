"""What an emulated rollout is held to, and by how much and why a run falls short.

    python -m benchmarks.targets benchmarks/results/emulated_h100_*.json   # (re)writes each file's "targets"

The targets are Seer's reported gains on its own rollouts, on 8 instances against plain SGLang fed as veRL
feeds it: ``divided`` at least 1.3x the throughput, ``context`` at least 1.4x and above ``divided`` and
``group``, ``context`` within 3% of ``oracle``, grouped speculation (``context+sd``) at least 1.8x, and a
tail (the last 10% of samples) at most 0.2x plain SGLang's. A run is held to those of its modes that it ran,
and a run's own validity to two more: every mode's steps within the profile (at most 5% overran) and the
simulator within 5% of every valid mode.

A target missed carries its shortfall and the evidence of why, from the run itself: the same run's
``oracle`` (the most any dispatch order gets from these workloads), and the simulator's bound policies on
the run's own workloads (``bounds``). ``late-oracle`` knows each group's longest sample once its first
sample finishes, ``group-oracle`` from the start; together they split ``context``'s gap to ``oracle`` into
its estimate, the first wave (dispatched before any length is known) and the spread of lengths within a
group. ``benchmarks.rollout`` writes the targets with every run; this command recomputes them for stored
runs, their workloads rebuilt from the config as ``benchmarks.sim_recheck`` rebuilds them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness.simulate import predict, rebuilt
from benchmarks.harness.targets import bound_modes, bounds, check


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="benchmarks.rollout --emulate result files")
    args = ap.parse_args()
    for name in args.files:
        path = Path(name)
        run = json.loads(path.read_text())
        if "ratios" not in run or not run["config"].get("emulate"):
            continue
        extra = bound_modes(run["modes"])
        found = {}
        if extra:
            try:
                traces, model, rule, run_args = rebuilt(run)
            except AttributeError as e:  # a config from before a setting existed
                print(f"{path.name}: no bounds ({e})")
            else:
                found = bounds(predict(traces, model, rule, run_args, extra))
        run["targets"] = {"bounds": found, "checks": check(run, found)}
        missed = [f"{r['mode']}: {r['target']}" for r in run["targets"]["checks"] if r["met"] is False]
        print(f"{path.name}: {len(run['targets']['checks'])} targets, missed: {'; '.join(missed) or 'none'}")
        path.write_text(json.dumps(run, indent=2))


if __name__ == "__main__":
    main()
