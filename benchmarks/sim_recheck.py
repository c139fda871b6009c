"""Redo the simulator check (``sim_check``) of stored emulated runs with the simulator as it is now.

    python -m benchmarks.sim_recheck benchmarks/results/emulated_h100_*.json

A run's measured figures stay as they were measured. Its workload, step model, KV cap and admission rule
are rebuilt from the file's config (``benchmarks.harness.simulate.rebuild``), and each repeat's workload is simulated as
``benchmarks.rollout`` simulated it, so an unchanged simulator gives the stored check back exactly. The
file then names the simulator's revision in ``sim_check_revision``. A file whose config predates a
setting the rebuild needs is left alone and named.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from benchmarks.harness.simulate import recheck


def revision() -> str:
    out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent)
    return out.stdout.strip() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="benchmarks.rollout --emulate result files")
    args = ap.parse_args()
    rev = revision()
    for name in args.files:
        path = Path(name)
        run = json.loads(path.read_text())
        if "sim_check" not in run or not run["config"].get("emulate"):
            continue
        try:
            check = recheck(run)
        except AttributeError as e:  # a config from before a setting existed
            print(f"{path.name}: left alone ({e})")
            continue
        for mode, new in check.items():
            old = run["sim_check"].get(mode, {})
            print(f"{path.name} {mode}: {old.get('error', float('nan')):+.1%} -> {new['error']:+.1%}")
        run["sim_check"], run["sim_check_revision"] = check, rev
        path.write_text(json.dumps(run, indent=2))


if __name__ == "__main__":
    main()
