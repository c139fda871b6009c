"""What bounds a measured emulated rollout, in the simulator that predicted it: more workloads of the same
shape, bound policies the real benchmark did not run, and speculation at other acceptance rates.

    python -m benchmarks.sim_bounds --from benchmarks/results/emulated_h100_moonlight_workloads.json \\
        --seeds 0-7 --modes divided,context,late-oracle,group-oracle,oracle --out benchmarks/results/sim_bounds_moonlight.json
    python -m benchmarks.sim_bounds --from benchmarks/results/emulated_h100_qwen2vl_sd_x30_plain.json \\
        --modes context,oracle,context+sd,oracle+sd --acceptance measured,seer-linear,seer-4path \\
        --out benchmarks/results/sim_bounds_qwen2vl_sd.json
    python -m benchmarks.sim_bounds --from RUN --prompts 128 --modes plain-router-p2,context,oracle,context+sd \\
        --acceptance DRAFT_REPLAY_RESULT --out benchmarks/results/sim_bounds/<date>-<label>

The step model, KV capacity, admission rule and workload generator are those of the result file
(``benchmarks.rollout`` rebuilt from its config, its prompts included), and the policies and the draft
budget are as they are now: with the file's own seeds each mode's prediction is its ``sim_check`` where
the run measured the same policies and budget.
``group-oracle`` knows each group's true longest sample from the start, and ``late-oracle`` from the
moment its first sample finishes (``context`` with a perfect estimate): together, the most a group-level
length estimate (``context``'s) can know, and when. Acceptance for ``+sd`` modes: ``measured`` is the file's
``--sim-acceptance`` (replayed on the text the run replayed); ``seer-linear`` and ``seer-4path`` are the
mean acceptance lengths the Seer paper reports for its models' text with 0, 1, 5 and 15 finished
siblings (linear and 4-path drafts). ``--prompts`` puts more (or fewer) prompt groups on the same instances
and KV: the run's shape at another load. Ratios are against plain SGLang fed whole groups (``baseline``) and,
in ``vs_reference``, against the strongest plain SGLang simulated (a router mode given in ``--modes``);
retractions are the simulated instances'. Simulated, not measured.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Callable

from benchmarks.harness.manifest import load_run, resolve
from benchmarks.harness.result import start as start_run
from benchmarks.harness.simulate import CONTEXT_TIES, mode_drafter, rebuild, run_acceptance, simulate_mode
from benchmarks.harness.baselines import is_plain
from benchmarks.harness.workload import workload_seeds
from seer_sglang.config import DRAFT, SCHEDULER
from seer_sglang.sim.spec_model import SpecModel, alpha_for_length
from seer_sglang.speculative.budget import AUTO_DRAFT_TOKENS
from seer_sglang.sim.workload import working_set

# Seer (v3): mean acceptance length, bonus token included, with n finished siblings as references.
SEER_ACCEPTANCE = {"seer-linear": ((0, 1.70), (1, 2.04), (5, 2.32), (15, 2.53)),
                   "seer-4path": ((0, 1.85), (1, 2.25), (5, 2.59), (15, 2.85))}
SEER_DRAFT_TOKENS = 8


def seer_spec(name: str) -> SpecModel:
    """A simulator acceptance from Seer's reported lengths: n references are the share n / 15 of a
    group's other siblings (the simulator interpolates on that share)."""
    points = tuple((n / 15, alpha_for_length(length, SEER_DRAFT_TOKENS)) for n, length in SEER_ACCEPTANCE[name])
    return SpecModel(own_alpha=points[0][1], group_alpha=points[-1][1], gamma_max=SEER_DRAFT_TOKENS,
                     measured=points, source=f"{name}: Seer's reported acceptance lengths")


def parse_seeds(text: str | None, default: list[int]) -> list[int]:
    if not text:
        return default
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return seeds


def plot(report: dict, path: Path) -> None:
    """Throughput vs plain SGLang per mode (bar: over all workloads; whiskers: the per-workload range)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = {k: m for k, m in report["modes"].items() if k != "baseline"}
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(modes)), 3.6))
    xs = range(len(modes))
    values = [m["throughput"] for m in modes.values()]
    low = [v - m["min"] for v, m in zip(values, modes.values())]
    high = [m["max"] - v for v, m in zip(values, modes.values())]
    ax.bar(xs, values, yerr=[low, high], capsize=4, color="tab:blue")
    ax.axhline(1.0, color="grey", lw=0.8)
    labels = [k.replace("acceptance_text_", "").replace(" (", "\n(") for k in modes]
    ax.set_xticks(list(xs), labels, fontsize=7, rotation=15)
    ax.set_ylabel("throughput vs plain SGLang")
    cfg = report["config"]
    ax.set_title(f"SIMULATED: {cfg['workload']}, {cfg['instances']} instances, {len(cfg['seeds'])} workload(s)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def against(base: list, rs: list) -> dict:
    """A mode's simulated runs against ``base``'s on the same workloads: throughput over all of them (with the
    per-workload range) and the tail."""
    base_tail = statistics.fmean(r.tail_s for r in base)
    per_seed = [b.completion_s / r.completion_s for b, r in zip(base, rs)]
    acc = [r.mean_acceptance_length for r in rs if r.mean_acceptance_length is not None]
    return {"completion_s": statistics.fmean(r.completion_s for r in rs),
            "tail_s": statistics.fmean(r.tail_s for r in rs),
            "throughput": sum(b.completion_s for b in base) / sum(r.completion_s for r in rs),
            "tail": statistics.fmean(r.tail_s for r in rs) / base_tail if base_tail else None,
            "per_seed": per_seed, "min": min(per_seed), "max": max(per_seed),
            "efficiency": statistics.fmean(r.efficiency for r in rs),
            "mean_acceptance_length": statistics.fmean(acc) if acc else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="source", required=True, help="a benchmarks.rollout --emulate run (its folder, "
                    "result file, or the flat path it was stored under)")
    ap.add_argument("--seeds", default=None, help="workload seeds, e.g. 0-7 (default: the file's own)")
    ap.add_argument("--prompts", type=int, default=None, help="prompt groups per workload: the load on the same "
                    "instances and KV (default: the file's own). Groups the run did not record have no text to "
                    "draft: give +sd modes an --acceptance curve then")
    ap.add_argument("--modes", default="divided,context,group-oracle,oracle",
                    help="policies, as benchmarks.rollout names them; plain SGLang (baseline) always runs")
    ap.add_argument("--acceptance", default="measured", help="for +sd modes: measured (the file's --sim-acceptance), seer-linear, "
                    "seer-4path, or a benchmarks.draft_replay --references result file")
    ap.add_argument("--profile", default=None, help="the step-time profile to simulate on, in place of the file's "
                    "--emulate (a profile name or file): the run's shape on another GPU model")
    ap.add_argument("--out", required=True, help="names the run (benchmarks.harness.result)")
    args = ap.parse_args()
    run = start_run("sim_bounds", args.out)

    source = load_run(args.source)
    config = {**source["config"], **({"prompts": args.prompts} if args.prompts else {}),
              **({"emulate": args.profile} if args.profile else {})}
    modes = args.modes.split(",")
    drafted = any(mode_drafter(m) for m in modes)
    if (args.prompts and args.prompts != source["config"]["prompts"] and drafted
            and "measured" in args.acceptance.split(",")):
        raise SystemExit("--prompts other than the run's: the recorded text covers only the run's own groups; "
                         "give --acceptance a benchmarks.draft_replay --references file (its curve)")
    # the policies and the draft budget as they are now
    run_args = argparse.Namespace(**{**config, "context_ties": CONTEXT_TIES, "budget_kv_read": True,
                                     "kv_headroom": SCHEDULER.kv_headroom,
                                     "draft_tokens": AUTO_DRAFT_TOKENS["ragged"], "draft_paths": DRAFT.draft_paths})
    own = workload_seeds(run_args)
    seeds = parse_seeds(args.seeds, own)
    prompts: list = []
    traces, model, rule = rebuild(config, seeds, prompts)
    specs: dict[str, Callable[[int], SpecModel]] = {}  # acceptance name -> the SpecModel for a workload seed
    for name in args.acceptance.split(",") if drafted else []:
        if name == "measured":
            if not config.get("sim_acceptance"):
                raise SystemExit("the file has no --sim-acceptance: use seer-linear or seer-4path")
            specs[Path(config["sim_acceptance"]).stem] = lambda seed: run_acceptance(run_args, seed)
        elif name in SEER_ACCEPTANCE:
            specs[name] = lambda seed, name=name: seer_spec(name)
        else:  # a benchmarks.draft_replay --references result
            path = Path(name)  # a run folder's result.json is named by its folder
            specs[path.parent.name if path.name == "result.json" else path.stem] = \
                lambda seed, name=name: SpecModel.from_replay(resolve(name))

    runs: dict[str, list] = {}
    for mode in ["baseline", *modes]:
        for acc in (specs if mode_drafter(mode) else [None]):
            key = mode if acc is None else f"{mode} ({acc})"
            runs[key] = [simulate_mode(mode, t, model, rule, run_args, None if acc is None else specs[acc](seed), p)
                         for t, seed, p in zip(traces, seeds, prompts)]
            print(f"{key}: {statistics.fmean(r.completion_s for r in runs[key]):.1f} s", flush=True)

    # the strongest plain SGLang simulated (whole groups, or a router mode given in --modes)
    reference = min((k for k in runs if k == "baseline" or is_plain(k)),
                    key=lambda k: sum(r.completion_s for r in runs[k]))
    summary = {key: {**against(runs["baseline"], rs), "retractions": statistics.fmean(r.retractions for r in rs),
                     "vs_reference": {k: v for k, v in against(runs[reference], rs).items()
                                      if k in ("throughput", "tail", "min", "max")}}
               for key, rs in runs.items()}
    report = {"config": {"from": args.source, "seeds": seeds, "source_seeds": own, "modes": list(runs),
                         "workload": config["workload"], "instances": config["instances"],
                         "prompts": config["prompts"], "group_size": config["group_size"],
                         "max_tokens": config["max_tokens"], "chunk_size": config["chunk_size"],
                         "kv_tokens": config["kv_tokens"], "emulate": config["emulate"],
                         "source_emulate": source["config"]["emulate"],
                         "emulate_time_scale": config["emulate_time_scale"],
                         "source_prompts": source["config"]["prompts"],
                         "working_set_over_kv": statistics.fmean(working_set(t) for t in traces)
                         / (config["instances"] * config["kv_tokens"]),
                         "acceptance": {k: s(seeds[0]).source for k, s in specs.items()}},
              "label": "SIMULATED, not measured: the simulator over the step model and workload of the source file",
              "reference": reference, "modes": summary}
    run.write(report)
    plot(report, run.file("plot.png"))
    for key, m in summary.items():
        ref = m["vs_reference"]
        print(f"{key:>28}: {m['throughput']:.3f}x ({m['min']:.2f}-{m['max']:.2f}) tail {m['tail']:.2f}x; "
              f"vs {reference} {ref['throughput']:.3f}x tail {ref['tail']:.2f}x; retractions {m['retractions']:.0f}; "
              f"efficiency {m['efficiency']:.2f}" + (f" acceptance {m['mean_acceptance_length']:.2f}"
                                                      if m["mean_acceptance_length"] else ""))


if __name__ == "__main__":
    main()
