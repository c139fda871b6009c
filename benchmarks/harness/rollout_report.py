"""The rollout benchmark's record of a run: every repeat of every mode as measured, and the report made
from it (each mode's mean and spread, the ratios against the strongest plain SGLang, the simulator's
check, the critical-path bound and regime, and on emulated runs the emulation's validity and targets)."""

from __future__ import annotations

import dataclasses
import statistics

from benchmarks.harness import targets
from benchmarks.harness.baselines import bound, ratio_keys, regime
from benchmarks.harness.emulation import emulation_counters, emulation_delta
from benchmarks.harness.rollout_metrics import metrics, summarise
from benchmarks.harness.rollout_setup import Setup
from benchmarks.harness.simulate import CONTEXT_TIES, predict, sim_check
from benchmarks.harness.sglang_router import retraction_counts, retraction_delta
from seer_sglang.config import EMULATION
from seer_sglang.core.step_model import StepModel
from seer_sglang.launch.emulation import admission
from seer_sglang.sim.workload import working_set


class Measured:
    """Every repeat of every mode, with the emulation counters around each run."""

    def __init__(self):
        self.runs: dict[str, list[dict]] = {}
        self.emulation: dict[str, list[dict]] = {}

    def run(self, mode: str, urls: list[str], emulated: bool, go) -> None:
        before = emulation_counters(urls) if emulated else []
        retracted = retraction_counts(urls)
        run = go()
        run["retraction_counter"] = retraction_delta(retracted, retraction_counts(urls))
        self.runs.setdefault(mode, []).append(run)
        if emulated:
            self.emulation.setdefault(mode, []).append(emulation_delta(before, emulation_counters(urls)))


def measured_step_model(setup: Setup, calib: dict) -> StepModel:
    """The model the simulator checks the run against: on a CPU the one calibrated on its instances,
    emulated the very profile the instances were padded to."""
    if setup.emulated is not None:
        return dataclasses.replace(setup.emulated, request_overhead_s=calib["request_overhead_s"])
    return StepModel(name=f"cpu-{setup.args.model}", decode_base_s=calib["decode_base_s"],
                     decode_per_seq_s=calib["decode_per_seq_s"], decode_per_kv_token_s=calib["decode_per_kv_token_s"],
                     prefill_per_token_s=calib["prefill_s_per_token"], capacity_tokens=setup.args.kv_tokens,
                     request_overhead_s=calib["request_overhead_s"], decode_batch_s=calib["decode_batch_s"],
                     source=f"measured by benchmarks.rollout on {setup.machine}")


def print_mode(mode: str, r: dict) -> None:
    kv = r.get("kv") or {}
    spread = r["spread"]["completion_s"]
    print(f"{mode:>13}: {r['completion_s']:7.1f} s (+-{spread['std']:.1f})  {r['throughput_tok_s']:8.0f} tok/s  "
          f"tail {r['tail_s']:6.1f} s  retractions {r['retractions']:.0f} ({r.get('retracted_tokens', 0):.0f} tokens)  "
          f"efficiency {r['efficiency']:.2f}  "
          f"re-prefill {kv.get('reprefill_tokens', '-')}  from pool {kv.get('pool', '-')}  "
          f"acceptance {r.get('mean_acceptance_length') or '-'}  "
          f"on target {r['repeats'][0].get('on_target_share', '-')}", flush=True)


def emulation_report(setup: Setup, measured: Measured) -> dict:
    """The emulation's label and validity: a mode whose worst repeat overran the profile too often
    measured the host, not the profile."""
    args = setup.args
    share = max((e["overrun_share"] for runs in measured.emulation.values() for e in runs), default=0.0)
    return {"label": "EMULATED: real SGLang instances on a small model, every forward step padded to the "
                     f"step-time profile {args.emulate}; not a GPU measurement",
            "profile": args.emulate, "model": dataclasses.asdict(setup.emulated), "length_scale": setup.length_scale,
            "time_scale": args.emulate_time_scale, "per_mode": measured.emulation, "overrun_share": share,
            "valid": share <= EMULATION.max_overrun_share,
            "valid_modes": {m: max(e["overrun_share"] for e in runs) <= EMULATION.max_overrun_share
                            for m, runs in measured.emulation.items()}}


def build_report(setup: Setup, modes: list[str], measured: Measured, calib: dict, servers: list, run) -> dict:
    """Every mode's mean and spread, the ratios against the reference, the simulator's check, the bound
    and regime, and (emulated) the emulation's validity and the targets."""
    args, works = setup.args, setup.works
    trace = works[0].trace
    results = {}
    for mode in modes:
        results[mode] = summarise([metrics(r, args.instances, calib) for r in measured.runs[mode]])
        print_mode(mode, results[mode])
    keys = ratio_keys(results)
    step_model = measured_step_model(setup, calib)
    if setup.emulated is None:
        step_model.save(run.file("step_model.json"))
    report = {"config": {**vars(args), "context_ties": CONTEXT_TIES, "machine": setup.machine, "samples": len(trace),
                         "working_set_tokens": working_set(trace), "workload_spec": setup.spec.__dict__,
                         "calibration": calib, "server_order": servers},
              "modes": results, **keys,
              "sim_check": sim_check([w.trace for w in works], step_model, admission(setup.emulation), args,
                                     results, [w.prompts for w in works], measured.emulation)}
    # the smallest step: the profile's lone short step where the steps are emulated, else the engines'
    # measured batch-1 step
    step_s, step_source = ((step_model.decode_step(1, 0), "the emulated profile's decode_step(1, 0)")
                           if setup.emulated is not None else (calib["min_step_s"], "measured batch-1 step (calibration)"))
    report["bound"] = bound(results, step_s, keys["reference"], step_source)
    report["regime"] = regime(step_model, len(trace), args.instances, statistics.fmean(s.prompt_len for s in trace),
                              statistics.fmean(s.output_len for s in trace), max(s.output_len for s in trace))
    b, g = report["bound"], report["regime"]
    print(f"reference: {keys['reference']}; critical path {b['critical_path_s']:.2f} s = {b['share']:.0%} of its "
          f"completion; regime: {g['requests_per_step']} requests per step, fixed share {g['fixed_share']:.2f}, "
          f"full over idle {g['full_over_idle']:.2f}", flush=True)
    if "note" in g:
        print(f"REGIME: {g['note']}", flush=True)
    if setup.emulated is not None:
        report["emulation"] = emulation_report(setup, measured)
        print(f"EMULATION overrun share {report['emulation']['overrun_share']:.3f} "
              f"(valid: {report['emulation']['valid']})", flush=True)
        found = targets.bounds(predict([w.trace for w in works], step_model, admission(setup.emulation), args,
                                       targets.bound_modes(results), [w.prompts for w in works]))
        report["targets"] = {"bounds": found, "checks": targets.check(report, found)}
        for r in report["targets"]["checks"]:
            if r["met"] is False:
                print(f"TARGET missed: {r['mode']}: {r['target']} ({r['why'] or 'no bound to say why'})", flush=True)
    return report


