"""Redo the simulator check (``sim_check``) of stored emulated runs with the simulator as it is now.

    python -m benchmarks.sim_recheck benchmarks/results/rollout/*-emulated_h100_*   # prints
    python -m benchmarks.sim_recheck RUN... --out recheck.json                      # and writes

A run's result stays as its run wrote it: the recheck is a view computed from it, printed (and with
``--out`` written to a file of its own), never stored back. Its workload, step model, KV cap and admission
rule are rebuilt from the run's config (``benchmarks.harness.simulate.rebuild``), and each repeat's
workload is simulated as ``benchmarks.rollout`` simulated it, so an unchanged simulator gives the stored
check back exactly; a difference is the simulator's change since the run. A run whose config predates a
setting the rebuild needs is named and skipped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from benchmarks.harness.manifest import load_run
from benchmarks.harness.simulate import recheck


def revision() -> str:
    out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent)
    return out.stdout.strip() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="benchmarks.rollout --emulate runs (folders or result files)")
    ap.add_argument("--out", type=Path, help="also write the rechecks here, by run (never into the runs)")
    args = ap.parse_args()
    rechecks = {}
    for name in args.runs:
        run = load_run(name)
        if "sim_check" not in run or not run["config"].get("emulate"):
            continue
        try:
            check = recheck(run)
        except AttributeError as e:  # a config from before a setting existed
            print(f"{name}: skipped ({e})")
            continue
        for mode, new in check.items():
            old = run["sim_check"].get(mode, {})
            print(f"{name} {mode}: {old.get('error', float('nan')):+.1%} -> {new['error']:+.1%}")
        rechecks[str(name)] = check
    if args.out:
        args.out.write_text(json.dumps({"simulator_revision": revision(), "sim_check": rechecks}, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
