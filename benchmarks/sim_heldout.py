"""The simulator on its held-out configurations (``benchmarks.harness.heldout``), apart from the runs it
was tuned on.

    python -m benchmarks.sim_heldout --run            # runs every held-out configuration (emulated)
    python -m benchmarks.sim_heldout --run qwen2vl_3x24
    python -m benchmarks.sim_heldout                  # prints each stored held-out run's check

``--run`` starts ``python -m benchmarks.rollout`` with each configuration's arguments; its result lands
in ``benchmarks/results/rollout/<date>-heldout_<name>/`` with the simulator's check of every mode in it,
made as every emulated run makes it. The report reads the stored held-out runs (through the manifest)
and prints, per mode, the simulator's signed error and whether the mode is valid (its steps kept up with
the profile), and how many valid mode-runs are within 5%: the figure a simulator change is judged on.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from benchmarks.harness.heldout import HELD_OUT, LABEL_PREFIX, checks
from benchmarks.harness.manifest import folder_label, read
from benchmarks.harness.result import RESULT, RESULTS, ROOT

SIM_ERROR = 0.05


def run(names: list[str]) -> None:
    chosen = [h for h in HELD_OUT if not names or h.name in names]
    unknown = set(names) - {h.name for h in HELD_OUT}
    if unknown:
        raise SystemExit(f"no held-out configuration {sorted(unknown)}; they are {[h.name for h in HELD_OUT]}")
    for h in chosen:
        cmd = [sys.executable, "-m", "benchmarks.rollout", *h.args(), "--out", str(RESULTS / f"{h.label}.json")]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


def stored() -> list[tuple[str, dict]]:
    """The held-out runs stored: every ``heldout_*`` rollout folder the manifest does not mark superseded
    (a run just made is not listed yet)."""
    superseded = {e.path for e in read() if e.status != "current"}
    out = []
    for folder in sorted((RESULTS / "rollout").glob(f"*-{LABEL_PREFIX}*")):
        if str(folder.relative_to(ROOT)) not in superseded and (folder / RESULT).is_file():
            out.append((folder_label(folder), json.loads((folder / RESULT).read_text())))
    return out


def report() -> None:
    runs = stored()
    if not runs:
        print("no held-out run stored yet: python -m benchmarks.sim_heldout --run")
        return
    rows = checks(runs)
    for r in rows:
        print(f"{r['run']:>28} {r['mode']:>16}: {r['error']:+.1%}" + ("" if r["valid"] else " (INVALID: not counted)"))
    valid = [r for r in rows if r["valid"]]
    within = sum(abs(r["error"]) <= SIM_ERROR for r in valid)
    print(f"held out: {within} of {len(valid)} valid mode-runs within {SIM_ERROR:.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", nargs="*", metavar="NAME", default=None,
                    help="run the held-out configurations (all, or those named) before the report")
    args = ap.parse_args()
    if args.run is not None:
        run(args.run)
    report()


if __name__ == "__main__":
    main()
