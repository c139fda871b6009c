"""The emulation held against reality on this machine: the same rollouts on real SmolLM2 instances and on
``tiny-smollm2`` instances padded to the step-time profile that the real run fitted (``benchmarks.rollout``
fits one from its calibration and writes it beside its result; ``cpu-smollm2`` is such a fit).

    python -m benchmarks.emulation_check --modes baseline,divided,context --out benchmarks/results/emulation_check_cpu.json

Both runs are ``benchmarks.rollout`` with the same workload (same prompts: the two models share
SmolLM2's tokenizer, same hidden target lengths), the real one first: its fit is the emulated run's
profile, so both describe the machine as it is during this run. If the emulation is right, each
mode completes in about the same time on both; ``error`` is emulated / real - 1 per mode, and the
issue's bar is 10%. The emulated instances pad each step to the profile, so what differs is what the
profile leaves out (the real model's steps vary with load, prompt lengths and the two instances
sharing two cores), and the host's own work between steps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness.result import load as load_result, start as start_run

ROLLOUT_ARGS = ["--instances", "2", "--workload", "moonlight", "--prompts", "8", "--group-size", "4",
                "--max-tokens", "256", "--chunk-size", "64", "--kv-tokens", "2048", "--dtype", "float32",
                "--calib-batches", "1,2,3,4,8,16", "--calib-steps", "16"]
RUNS = {"real": ["--model", "smollm2"],
        "emulated": ["--model", "tiny-smollm2", "--emulate-time-scale", "1", "--emulate-length-scale", "1"]}


def compare(r: dict, e: dict, bar: float) -> dict:
    """One mode, real (``r``) against emulated (``e``): the error of the whole rollout, and apart the error
    until 90% of the samples finished (the body) and after it (the tail), so that a miss says where it is."""
    error = e["completion_s"] / r["completion_s"] - 1.0
    body_error = (e["completion_s"] - e["tail_s"]) / (r["completion_s"] - r["tail_s"]) - 1.0
    out = {"real_s": r["completion_s"], "emulated_s": e["completion_s"], "error": error,
           "within_bar": abs(error) <= bar, "body_error": body_error, "tail_error": e["tail_s"] / r["tail_s"] - 1.0,
           "real_spread": r["spread"]["completion_s"], "emulated_spread": e["spread"]["completion_s"],
           "real_tail_s": r["tail_s"], "emulated_tail_s": e["tail_s"],
           "real_retractions": r["retractions"], "emulated_retractions": e["retractions"]}
    if not out["within_bar"]:
        where = "the tail" if abs(body_error) <= bar else "the body and the tail"
        out["why"] = (f"in {where}: until 90% of the samples finished {body_error:+.1%}; the last 10% took "
                      f"{r['tail_s']:.1f} s real, {e['tail_s']:.1f} s emulated")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.emulation_check")
    ap.add_argument("--modes", default="baseline,divided,context")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bar", type=float, default=0.10, help="largest relative error that passes")
    ap.add_argument("--out", default="benchmarks/results/emulation_check_cpu.json")
    args = ap.parse_args()
    run = start_run("emulation_check", args.out)
    runs = {}
    profile = run.file("step_model.json")
    with tempfile.TemporaryDirectory() as tmp:
        for name in RUNS:
            out = Path(tmp) / f"{name}.json"  # names the rollout's run: tmp/rollout/<date>-<name>/
            emulate = ["--emulate", str(profile)] if name == "emulated" else []
            cmd = [sys.executable, "-m", "benchmarks.rollout", *ROLLOUT_ARGS, *RUNS[name], *emulate,
                   "--modes", args.modes, "--repeats", str(args.repeats), "--seed", str(args.seed), "--out", str(out)]
            print(f"[{name}] {' '.join(cmd[2:])}", flush=True)
            subprocess.run(cmd, check=True)
            folder = max((Path(tmp) / "rollout").glob(f"*-{name}"))
            runs[name] = load_result(folder)
            if name == "real":  # the fit of this run is the profile the emulated instances pad to
                profile.write_text((folder / "step_model.json").read_text())
    real, emulated = runs["real"], runs["emulated"]
    per_mode = {}
    for mode in args.modes.split(","):
        r, e = real["modes"][mode], emulated["modes"][mode]
        per_mode[mode] = compare(r, e, args.bar)
        error = per_mode[mode]["error"]
        print(f"{mode:>10}: real {r['completion_s']:6.1f} s  emulated {e['completion_s']:6.1f} s  "
              f"error {error:+.1%}", flush=True)
    report = {"config": {**vars(args), "rollout_args": ROLLOUT_ARGS, "runs": RUNS, "order": list(RUNS),
                         "profile": str(profile), "profile_fit": json.loads(profile.read_text()),
                         "machine": real["config"]["machine"]},
              "label": "the emulation checked against real SmolLM2 instances on this CPU (not a GPU measurement)",
              "per_mode": per_mode, "overrun_share": emulated["emulation"]["overrun_share"],
              **{name: {m: {k: r[k] for k in ("completion_s", "tail_s", "retractions", "spread")}
                        for m, r in run["modes"].items()} for name, run in runs.items()}}
    print(f"wrote {run.write(report)}")


if __name__ == "__main__":
    main()
