"""Redo the simulator check (``sim_check``) of stored emulated runs with the simulator as it is now.

    python -m benchmarks.sim_recheck benchmarks/results/rollout/*-emulated_h100_*   # prints
    python -m benchmarks.sim_recheck RUN... --out benchmarks/results/sim_recheck/<date>-<label>  # and stores

Each mode's line also puts the simulated steps beside the emulated instances' (prefill batches and
decode steps, with their modelled time), so a miss shows whether the simulator ran fewer or cheaper
steps, or idled its instances more. A run's result stays as its run wrote it: the recheck is a view computed from it, printed (and with
``--out`` stored as a result of its own, with the commit it ran at), never stored back. Its workload, step model, KV cap and admission
rule are rebuilt from the run's config (``benchmarks.harness.simulate.rebuild``), and each repeat's
workload is simulated as ``benchmarks.rollout`` simulated it, so an unchanged simulator gives the stored
check back exactly; a difference is the simulator's change since the run. A run with a ``context`` mode
also gets its ``targets`` again (``targets_now``: the simulator's bound policies on its workloads, and
the checks they give). The newest stored recheck of a run is what the simulator must give now
(``manifest.latest_recheck``; the unit tests hold it to that). A run whose config predates a setting
the rebuild needs is named and skipped.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from benchmarks.harness.manifest import load_run
from benchmarks.harness.result import start as start_run
from benchmarks.harness.simulate import rebounds, recheck
from benchmarks.harness.targets import check as check_targets


def revision() -> str:
    out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent)
    return out.stdout.strip() or "unknown"


def steps_line(split: dict) -> str:
    """The simulated steps against the emulated instances' (all instances, mean per repeat)."""
    p, r = split["predicted"], split["real"]
    return (f"prefills {p['prefill_steps']:.0f} ({p['prefill_s']:.1f} s) against {r['prefill_steps']:.0f} "
            f"({r['prefill_s']:.1f} s), decode steps {p['decode_steps']:.0f} ({p['decode_s']:.1f} s) against "
            f"{r['decode_steps']:.0f} ({r['decode_s']:.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="benchmarks.rollout --emulate runs (folders or result files)")
    ap.add_argument("--out", help="also store the rechecks as a result (benchmarks.harness.result), by run: "
                    "each mode's stored check and the one now (never into the runs)")
    args = ap.parse_args()
    out = start_run("sim_recheck", args.out) if args.out else None
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
            print(f"{name} {mode}: {old.get('error', float('nan')):+.1%} -> {new['error']:+.1%}"
                  + (f"; {steps_line(new['steps'])}" if "steps" in new else ""))
        rechecks[str(name)] = {"stored": run["sim_check"], "now": check}
        found = rebounds(run)
        if found:  # the run's targets from the simulator's bound policies now, beside its stored ones
            rechecks[str(name)]["targets_now"] = {"bounds": found, "checks": check_targets(run, found)}
    if out is not None:
        out.write({"label": "SIMULATED against EMULATED runs: each mode's stored simulator check and the "
                            "simulator's check of the same run now", "simulator_revision": revision(),
                   "runs": rechecks})
        print(f"wrote {out.folder}")


if __name__ == "__main__":
    main()
