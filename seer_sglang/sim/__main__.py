"""``python -m seer_sglang.sim``: simulate rollouts at cluster scale with the real policy objects.

    python -m seer_sglang.sim --workload moonlight --instances 32 --prompts 256 \
        --out /tmp/sim_moonlight.json

Runs every policy (the ablation), a chunk-size sweep for ``context``, and the gain of ``context``
over plain SGLang (``round-robin``: veRL's dispatch) as the number of instances and the length spread
grow. Each instance's KV holds half its part of the working set, as in Seer. ``--out`` writes the
report as JSON; ``python -m benchmarks.sim`` takes the same flags and stores the run as a benchmark
result (a run folder with the command, commit and machine, and a plot).

``--max-tokens`` and ``--time-scale`` simulate an emulated testbed's run (``benchmarks.rollout
--emulate``): the workload's lengths, the profile and SGLang's admission scaled as the emulated
instances scale them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from ..config import SCHEDULER
from ..core.policy import make_policy
from .simulator import simulate
from .spec_model import SpecModel
from ..core.step_model import Admission, load_profile, profile_names
from .workload import PRESETS, generate, kv_cap, load_trace

POLICIES = ("round-robin", "group", "divided", "context", "oracle", "divided+pool", "context+pool", "context+pool+sd",
            "context+pool+sd-suffix")


def mode_features(name: str, spec: SpecModel | None = None) -> tuple[str, bool, SpecModel | None]:
    """``<policy>[+pool][+sd|+sd-suffix|+sd-bucketed]`` -> (policy, pool on, speculation model or None);
    ``+sd-bucketed`` verifies the budget's drafts padded to each step's bucket."""
    policy, *features = name.split("+")
    unknown = set(features) - {"pool", "sd", "sd-suffix", "sd-bucketed"}
    if unknown:
        raise ValueError(f"unknown mode feature(s) {sorted(unknown)} in {name!r}")
    spec = spec or SpecModel()
    sd = None
    if "sd" in features:
        sd = spec
    elif "sd-suffix" in features:
        sd = dataclasses.replace(spec, grouped=False)
    elif "sd-bucketed" in features:
        sd = dataclasses.replace(spec, verify_layout="bucketed")
    return policy, "pool" in features, sd


def run_policies(trace, model, instances, max_tokens, chunk_size, policies=POLICIES,
                 spec: SpecModel | None = None, admission: Admission = Admission()) -> dict:
    out = {}
    for name in policies:
        t0 = time.perf_counter()
        policy_name, with_pool, sd = mode_features(name, spec)
        migration = model.migration_cost()
        pool = migration if with_pool and model.pool_load_s_per_token else None
        # round-robin is plain SGLang fed as veRL feeds it: its instances run without the plugin
        result = simulate(trace, make_policy(policy_name, chunk_size=chunk_size, migration=migration), model,
                          instances, max_tokens, pool, sd, admission=admission, plain=policy_name == "round-robin")
        out[name] = {**result.summary(), "sim_wall_s": time.perf_counter() - t0}
    base = out[policies[0]]
    for name in policies:
        out[name]["ratio_throughput"] = out[name]["throughput_tok_s"] / base["throughput_tok_s"]
        out[name]["ratio_tail"] = out[name]["tail_s"] / base["tail_s"] if base["tail_s"] else None
    return out


def parser(prog: str = "python -m seer_sglang.sim") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--workload", default="moonlight", choices=sorted(PRESETS))
    ap.add_argument("--trace", default=None, help="replay a JSONL trace instead of generating one")
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--instances", type=int, default=32)
    ap.add_argument("--chunk-size", type=int, default=SCHEDULER.chunk_size)
    ap.add_argument("--chunk-sweep", default="1024,2048,4096,8192,16384")
    ap.add_argument("--instance-sweep", default="4,8,16,32")
    ap.add_argument("--spread-sweep", default="0.5,1.0,1.5", help="log-sigma of group means")
    ap.add_argument("--model", default="h100-70b", help=f"step-time profile: one of {profile_names()} "
                    "(seer_sglang/profiles) or a StepModel JSON file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spec-own-alpha", type=float, default=SpecModel.own_alpha,
                    help="+sd modes: acceptance probability of a draft token from a request's own history")
    ap.add_argument("--spec-group-alpha", type=float, default=SpecModel.group_alpha,
                    help="+sd modes: acceptance probability once all siblings have finished (group-suffix)")
    ap.add_argument("--acceptance", default=None, help="+sd modes: acceptance measured on real text, a "
                    "benchmarks.draft_replay --references result (replaces the two alphas)")
    ap.add_argument("--kv-share", type=float, default=None,
                    help="each instance's KV holds this share of its part of the working set (default: the "
                         "workload's, 0.5 as in Seer; 0 keeps the profile's capacity)")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="scale the workload to this longest output, and the profile and SGLang's admission with "
                         "it, as an emulated testbed does (default: the workload's own lengths)")
    ap.add_argument("--time-scale", type=float, default=1.0, help="stretch every time of the profile (as "
                    "--emulate-time-scale does)")
    ap.add_argument("--prompt-len", default=None, help="prompt lengths MIN,MAX (default: the workload's)")
    ap.add_argument("--policies", default=",".join(POLICIES), help="the ablation's modes; the first is the reference")
    ap.add_argument("--quick", action="store_true", help="ablation only, no sweeps")
    ap.add_argument("--out", default=None, help="write the report here as JSON")
    return ap


def run(args: argparse.Namespace) -> dict:
    """The ablation (and, without ``--quick``, the sweeps) the flags ask for, printed as it runs."""
    spec = PRESETS[args.workload]
    scale = 1.0 if args.max_tokens is None else args.max_tokens / spec.max_tokens
    prompt_len = tuple(int(x) for x in args.prompt_len.split(",")) if args.prompt_len else None
    if args.max_tokens is not None or prompt_len is not None:
        spec = spec.scaled(args.max_tokens or spec.max_tokens, prompt_len)
    model = load_profile(args.model)
    if scale != 1.0 or args.time_scale != 1.0:
        model = model.scaled(scale, args.time_scale)
    admission = Admission().scaled(scale)
    trace = load_trace(args.trace) if args.trace else generate(spec, args.prompts, args.seed)
    share = spec.kv_share if args.kv_share is None else args.kv_share
    if share > 0:  # the instance sweep keeps this per-instance KV: the hardware stays, the load per instance moves
        model = dataclasses.replace(model, capacity_tokens=kv_cap(trace, args.instances, share))
    report: dict = {"config": {**vars(args), "kv_share": share, "step_model": dataclasses.asdict(model),
                               "admission": dataclasses.asdict(admission),
                               "workload_spec": dataclasses.asdict(spec), "samples": len(trace)}}
    sd = (SpecModel.from_replay(args.acceptance) if args.acceptance
          else SpecModel(own_alpha=args.spec_own_alpha, group_alpha=args.spec_group_alpha))
    report["config"]["acceptance_source"] = sd.source
    report["ablation"] = run_policies(trace, model, args.instances, spec.max_tokens, args.chunk_size,
                                      tuple(args.policies.split(",")), spec=sd, admission=admission)
    _print("ablation", report["ablation"])
    if not args.quick:
        report["chunk_sweep"] = {
            c: run_policies(trace, model, args.instances, spec.max_tokens, int(c),
                            ("round-robin", "context"), admission=admission)["context"]
            for c in args.chunk_sweep.split(",")}
        report["instance_sweep"] = {
            n: run_policies(trace, model, int(n), spec.max_tokens, args.chunk_size, ("round-robin", "context"),
                               admission=admission)
            for n in args.instance_sweep.split(",")}
        report["spread_sweep"] = {}
        for sigma in args.spread_sweep.split(","):
            wider = dataclasses.replace(spec, group_sigma=float(sigma))
            report["spread_sweep"][sigma] = run_policies(generate(wider, args.prompts, args.seed), model,
                                                         args.instances, spec.max_tokens, args.chunk_size,
                                                         ("round-robin", "context"), admission=admission)
    return report


def main() -> None:
    args = parser().parse_args()
    out = run(args)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2))


def _print(title: str, rows: dict) -> None:
    print(f"== {title}")
    for name, r in rows.items():
        print(f"  {name:>8}: {r['completion_s']:9.1f} s  {r['throughput_tok_s']:10.0f} tok/s  "
              f"x{r['ratio_throughput']:.2f}  tail {r['tail_s']:8.1f} s  retractions {r['retractions']}")


if __name__ == "__main__":
    main()
