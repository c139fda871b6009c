"""What an emulated rollout is held to, and by how much and why a run falls short, for stored runs.

    python -m benchmarks.targets benchmarks/results/rollout/*-emulated_h100_*   # prints each run's targets
    python -m benchmarks.targets RUN... --out targets.json                      # and writes them

The targets and their evidence are ``benchmarks.harness.targets``'s; ``benchmarks.rollout`` checks them
with every run and stores them in its result. This command computes them again for stored runs, their
workloads rebuilt from the config as ``benchmarks.sim_recheck`` rebuilds them, and prints them (with
``--out``, writes them to a file of its own): a run's result stays as its run wrote it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness.manifest import load_run
from benchmarks.harness.simulate import rebounds
from benchmarks.harness.targets import check


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="benchmarks.rollout --emulate runs (folders or result files)")
    ap.add_argument("--out", type=Path, help="also write the targets here, by run (never into the runs)")
    args = ap.parse_args()
    found_all = {}
    for name in args.runs:
        run = load_run(name)
        if "ratios" not in run or not run["config"].get("emulate"):
            continue
        try:
            found = rebounds(run)
        except AttributeError as e:  # a config from before a setting existed
            print(f"{name}: no bounds ({e})")
            found = {}
        targets = {"bounds": found, "checks": check(run, found)}
        missed = [f"{r['mode']}: {r['target']}" for r in targets["checks"] if r["met"] is False]
        print(f"{name}: {len(targets['checks'])} targets, missed: {'; '.join(missed) or 'none'}")
        found_all[str(name)] = targets
    if args.out:
        args.out.write_text(json.dumps(found_all, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
