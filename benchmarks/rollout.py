"""One-run rollout benchmark: plain SGLang as trainers feed it vs seer_sglang's policies, same machine, same engines.

    python -m benchmarks.rollout --modes plain-group,plain-router,plain-router-p2,group,divided,context,oracle \
        --instances 2 --model tiny --prompts 32 --group-size 8 --max-tokens 1024 --seed 0 \
        --out benchmarks/results/cpu_tiny.json

- The plain modes are K SGLang instances started without the seer plugin, fed as trainers feed them:
  ``plain-group`` sends each prompt group whole to one instance, round-robin, its G requests together
  (veRL-style; ``baseline`` is its former name, still accepted); ``plain-router`` sends one
  ``/generate`` per sample through sglang-router (slime-style) with its default ``cache_aware`` policy,
  ``plain-router-p2`` with ``power_of_two`` (``benchmarks.harness.sglang_router`` starts the router for
  each rollout and stops it). Caches are flushed before every rollout of every mode.
- The other modes are seer_sglang's policies on K instances with the plugin, switched between runs
  with ``POST /scheduler`` (radix caches flushed in between). ``<mode>+pool`` runs the same policy
  with the global KV pool (``--kv-pool file``); plain ``<mode>`` runs with ``--kv-pool none``, so
  the pair shows what the pool saves in re-prefill.

A speed-up counts against the strongest plain SGLang of the same run: the result's ``reference`` is
the plain mode with the highest throughput, ``ratios`` are against it and ``ratios_by_baseline`` keeps
the ratios against every plain mode (``benchmarks.harness.baselines``). Every instance runs with
``--enable-metrics``, and each mode's ``retractions`` are the instances' own counter over its rollout.
Every result holds the critical-path bound (``bound``: the longest sample at the smallest step) and
the run's ``regime`` on its step model, which says when a run cannot show what balancing the tail gains.

With ``--emulate PROFILE`` every instance, plain or seer, pads its forward steps to a step-time
profile (``seer_sglang/profiles``): EMULATED GPU timings, labelled as such in the JSON, never GPU
measurements. Lengths are the workload's scaled to ``--max-tokens``; each instance then holds the
profile's KV scaled the same way. The baseline instances load the plugin for the emulation only.

Every sample has a hidden target length from a Seer-shaped workload (``--workload``: Seer's group
size and length shape, scaled to ``--max-tokens``; long tail across groups, alike within a group),
enforced by a custom logit processor, so no scheduler can see it; only the ``oracle`` mode is told
the lengths. Each instance holds ``--kv-share`` of its part of the working set (0.5), or with
``--kv-share 0`` the profile's own KV at the run's length scale: Seer's load, many more groups than
fit at once on instances as large as the GPU's.
Every server is warmed with a rollout of other prompts (with ``--replay``, replaying recorded text
too); ``--repeats`` runs each mode that many times, in a random order per repeat. Writes its run
(``benchmarks.harness.result``: config, per-mode mean, spread and repeats, ratios against the reference,
the simulator's prediction of each mode) with a plot, the trace and (on a CPU) the fitted step model
beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import asyncio
import json
import platform
import random
import statistics
import time
from pathlib import Path

import httpx

from benchmarks.harness import targets
from benchmarks.harness.calibration import calib_batches, calibrate
from benchmarks.harness.rollout_metrics import last_samples, metrics, summarise
from benchmarks.harness.rollout_plot import plot
from benchmarks.harness.telemetry import LoadPoller
from benchmarks.harness.baselines import (ROUTER_POLICIES, bound, canonical, is_plain, ratio_keys,
                                          regime)
from benchmarks.harness.manifest import resolve
from benchmarks.harness.result import start as start_run
from benchmarks.harness.servers import seer_server
from benchmarks.harness.emulation import emulation_counters, emulation_delta, emulation_settings
from benchmarks.harness.simulate import CONTEXT_TIES, mode_options, mode_speculation, predict, sim_check
from benchmarks.harness.sglang_router import (ParamsShim, retraction_counts, retraction_delta, start_router,
                                              stop_router)
from benchmarks.harness.workload import (Workload, build_workload, compact_vocabulary, load_recording,
                                         prompt_tokenizer, replay_for_warmup, workload_seeds, workload_shape)
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, has_cuda, plan_gpus,
                                            start_instance, stop_instances, visible_gpus, wait_healthy)
from seer_sglang.models import resolve_model_path, vocab_size as model_vocab_size
from seer_sglang.config import EMULATION, EmulationConfig, PluginConfig
from seer_sglang.launch.emulation import admission, instance_args, instance_env, plugin_settings
from seer_sglang.core.step_model import StepModel
from seer_sglang.sim.workload import PRESETS, TraceSample, kv_cap, save_trace, working_set

ROOT = Path(__file__).resolve().parent.parent


# ---- the two kinds of run --------------------------------------------------------------------

def sample_params(ids: list[int], sample: TraceSample, eos: int, replay: dict | None) -> dict:
    """A sample's hidden target: its length, or with a recording (``--replay``) its recorded text."""
    from seer_sglang.benchmarking.force_length import custom_params

    return custom_params(len(ids), sample.output_len, eos, (replay or {}).get((sample.group_id, sample.sample_index)))


def baseline_rid(sample: TraceSample) -> str:
    """A plain SGLang request's rid (``benchmarks.step_log`` reads plain requests by it)."""
    return f"b{sample.group_id}-{sample.sample_index}"


async def run_baseline(urls: list[str], prompts: list[list[int]], trace: list[TraceSample], args, eos: int,
                       replay: dict | None = None, router: str | None = None) -> dict:
    """One plain SGLang rollout: without ``router``, each group whole to one instance, round-robin, as
    veRL's agent loop sends it (``plain-group``); with it, one ``/generate`` per sample to the router,
    as slime sends them, the router choosing the instance (``plain-router``). The instances' caches are
    flushed first, as before every seer rollout, so no mode starts from another's prefixes."""
    from seer_sglang.benchmarking.force_length import ForceLengthProcessor

    processor = ForceLengthProcessor.to_str()
    poller = LoadPoller(urls)
    finish: list[dict] = []

    async def one(http: httpx.AsyncClient, url: str, ids: list[int], sample: TraceSample) -> None:
        body = {"input_ids": ids, "custom_logit_processor": processor, "rid": baseline_rid(sample),
                "sampling_params": {"max_new_tokens": args.max_tokens, "temperature": 1.0,
                                    "custom_params": sample_params(ids, sample, eos, replay)}}
        r = (await http.post(f"{url}/generate", json=body)).json()
        finish.append({"t": time.time(), "tokens": len(r["output_ids"]),
                       "retractions": r["meta_info"].get("num_retractions", 0), "target": sample.output_len})

    async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None)) as http:
        for url in urls:
            (await http.post(f"{url}/flush_cache")).raise_for_status()
        poller.start()
        start = time.time()
        tasks = [one(http, router or urls[s.group_id % len(urls)], prompts[s.group_id], s) for s in trace]
        await asyncio.gather(*tasks)
        await poller.stop()
    return {"start": start, "finish": finish, "timeline": poller.points}


async def run_seer(url: str, mode: str, prompts: list[list[int]], trace: list[TraceSample], args, eos: int,
                   tag: str = "", replay: dict | None = None) -> dict:
    """One rollout of ``trace`` through the seer frontend; ``tag`` keeps group ids apart between rollouts."""
    from seer_sglang.benchmarking.force_length import ForceLengthProcessor

    by_group: dict[int, list[TraceSample]] = {}
    for s in trace:
        by_group.setdefault(s.group_id, []).append(s)
    body = {"prompts": [], "n": args.group_size, "max_tokens": args.max_tokens, "temperature": 1.0,
            "logprobs": False, "custom_logit_processor": ForceLengthProcessor.to_str(), "return_timeline": True}
    for g, members in sorted(by_group.items()):
        ids = prompts[g]
        prompt = {"input_ids": ids, "group_id": f"{tag}{mode}-{g}",
                  "custom_params": [sample_params(ids, m, eos, replay) for m in members]}
        if mode.startswith(("oracle", "group-oracle", "late-oracle")):
            prompt["oracle_lengths"] = [m.output_len for m in members]
        body["prompts"].append(prompt)
    async with httpx.AsyncClient(timeout=None) as http:
        name, options = mode_options(mode)
        r = await http.post(f"{url}/scheduler", json={"name": name, "chunk_size": args.chunk_size,
                                                      "whole_tail": "tail" in options,
                                                      "spread_ties": "arrival" not in options})
        r.raise_for_status()
        (await http.post(f"{url}/flush_cache")).raise_for_status()
        start = time.time()
        r = await http.post(f"{url}/v1/rollout", json=body)
        if r.status_code != 200:
            raise RuntimeError(f"{mode}: /v1/rollout answered {r.status_code}: {r.text}")
    data = r.json()
    finish = [{"t": s["timing"]["submitted_at"] + s["timing"]["latency_s"], "tokens": s["completion_tokens"],
               "retractions": sum(c.get("retractions", 0) for c in s["chunks"]), "target": None}
              for s in data["samples"]]
    return {"start": start, "finish": finish, "timeline": data["summary"]["timeline"],
            "chunks": data["summary"]["chunks"], "kv": data["summary"].get("kv"), "spec": data["summary"].get("spec"),
            "last_samples": last_samples(data["samples"], start)}


# ---- main ------------------------------------------------------------------------------------


def server_config(mode: str, default_draft: str) -> tuple[str, str, str]:
    """(kv pool, drafter, draft budget) of the seer server a mode runs on: modes that agree share one."""
    _, options = mode_options(mode)
    return ("file" if "pool" in options else "none"), *mode_speculation(mode, default_draft)


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


def run_modes(server: str, modes: list[str], args, works: list[Workload], rng: random.Random, measured: Measured,
              urls: list[str], emulated: bool, run_one) -> None:
    """Warm the server with a rollout of other prompts, then every repeat runs its modes on its workload
    (``works[repeat]``) in a fresh random order (``run_one(mode, prompts, trace, tag, replay)`` does one
    rollout; ``tag`` keeps group ids apart)."""
    if args.warmup_prompts:
        print(f"[{server}] warm-up rollout ...", flush=True)
        run_one(modes[0], works[0].warm_prompts, works[0].warm_trace, "warm-", works[0].warm_replay)
    for repeat, work in enumerate(works):
        for mode in rng.sample(modes, len(modes)):
            print(f"[{server}] repeat {repeat + 1}/{len(works)}: {mode} ...", flush=True)
            measured.run(mode, urls, emulated,
                         lambda: run_one(mode, work.prompts, work.trace, f"r{repeat}-", work.replay))


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.rollout")
    ap.add_argument("--modes", default="plain-group,plain-router,plain-router-p2,group,divided,context,oracle",
                    help="plain SGLang: plain-group (each group whole to one instance, round-robin; 'baseline' "
                         "is its former name), plain-router (one /generate per sample through sglang-router, "
                         "cache_aware), plain-router-p2 (the router's power_of_two); the rest are seer's policies, "
                         "with options: +pool (global KV pool), +sd (grouped speculation, the adaptive budget), "
                         "+sd-fixed (every draft verified at every batch size: the GPU path's fixed verify width), "
                         "+sd-<drafter>, +tail, +arrival")
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=None, help="default: the workload's (Seer's G)")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--workload", default="moonlight", choices=sorted(PRESETS))
    ap.add_argument("--chunk-size", type=int, default=256)
    ap.add_argument("--kv-tokens", type=int, default=None,
                    help="per-instance KV cap (--max-total-tokens); default: --kv-share of the working set")
    ap.add_argument("--kv-share", type=float, default=None,
                    help="each instance's KV holds this share of its part of the working set (prompts and full "
                         "outputs); default: the workload's (0.5); 0 with --emulate: the profile's own capacity "
                         "at the run's length scale (Seer's load: the KV a GPU instance holds, with many more "
                         "groups than fit at once)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1, help="rollouts per mode; modes run in a random order "
                    "per repeat, and the report gives each mode's mean and spread")
    ap.add_argument("--calib-batches", default="1,4,16,64", help="batch sizes timed for the step model")
    ap.add_argument("--calib-steps", type=int, default=64)
    ap.add_argument("--draft", default="group-suffix", help="drafter of the +sd modes (+sd-<drafter> picks one)")
    ap.add_argument("--warmup-prompts", type=int, default=None,
                    help="before its measured rollouts, every server (plain or seer) runs one rollout of this many "
                         "other prompts (default: one per instance)")
    ap.add_argument("--emulate", default=None, help="EMULATION: pad every instance's steps to this step-time "
                    "profile (h100-70b, moe-kimi-k2, cpu-smollm2, or a file)")
    ap.add_argument("--emulate-time-scale", type=float, default=EMULATION.time_scale,
                    help="stretch every emulated time (keep the real model below it)")
    ap.add_argument("--emulate-length-scale", type=float, default=None,
                    help="the workload's lengths relative to the profile's (default: --max-tokens over the "
                         "workload's own maximum; 1 for a profile fitted at these lengths, e.g. cpu-smollm2)")
    ap.add_argument("--emulate-step-log", default=None, metavar="PREFIX",
                    help="every emulated instance writes its steps to PREFIX.<pid> (benchmarks.step_log reads them)")
    ap.add_argument("--vary-trace", action="store_true",
                    help="repeat r runs the workload of seed --seed + r (other prompts and lengths), so the means "
                         "are over workloads, not over runs of one; the KV cap is the mean over them")
    ap.add_argument("--replay", default=None, help="a benchmarks.record_text recording of this workload: every "
                    "sample writes its recorded text (run a model with the recording's vocabulary, e.g. "
                    "tiny-smollm2), so speculation's acceptance is that of real text")
    ap.add_argument("--sim-acceptance", default=None, help="a benchmarks.draft_replay --references result on the "
                    "replayed text: the simulator's acceptance for the +sd modes (without it they are not simulated)")
    ap.add_argument("--out", default="benchmarks/results/rollout.json")
    args = ap.parse_args()
    # the instances' draft budget counts the batch's KV read: recorded, so the simulator rebuilds this run
    # with it (runs without the key were made before it did)
    args.budget_kv_read = True
    preset = PRESETS[args.workload]
    args.group_size = args.group_size or preset.group_size
    args.kv_share = args.kv_share if args.kv_share is not None else preset.kv_share
    if args.warmup_prompts is None:
        args.warmup_prompts = args.instances
    emulated, length_scale = emulation_settings(args)

    modes = list(dict.fromkeys(canonical(m) for m in args.modes.split(",")))
    if "plain-router-p2" in modes and args.instances < 2:
        raise SystemExit("plain-router-p2: sglang-router's power_of_two policy needs at least 2 instances")
    model_path = resolve_model_path(args.model)
    recording = json.loads(resolve(args.replay).read_text()) if args.replay else None
    tokenizer = prompt_tokenizer(args, recording)
    spec = workload_shape(args)
    seeds = workload_seeds(args)
    by_seed = {}
    for seed in seeds:
        by_seed[seed] = build_workload(argparse.Namespace(**{**vars(args), "seed": seed}), tokenizer, spec)
        if recording is not None:
            by_seed[seed].replay = load_recording(recording, args, seed, by_seed[seed].prompts)
            by_seed[seed].warm_replay = replay_for_warmup(by_seed[seed].warm_trace, by_seed[seed].replay)
    vocab_size = model_vocab_size(model_path)
    if compact_vocabulary(list(by_seed.values()), vocab_size, {work.eos for work in by_seed.values()}
                          | set(tokenizer.tok.all_special_ids)) is not None:
        print(f"tokens mapped one to one into the model's vocabulary of {vocab_size}", flush=True)
    works = [by_seed[s] for s in seeds] if args.vary_trace else [by_seed[args.seed]] * args.repeats
    work = works[0]
    trace = work.trace
    if args.kv_tokens is None and args.kv_share == 0:
        if emulated is None:
            raise SystemExit("--kv-share 0 (the profile's capacity) needs --emulate")
        args.kv_tokens = emulated.capacity_tokens
    if args.kv_tokens is None:  # with --vary-trace: the mean over the repeats' workloads
        args.kv_tokens = int(statistics.fmean(kv_cap(by_seed[s].trace, args.instances, args.kv_share) for s in seeds))
    working = working_set(trace)
    print(f"workload {args.workload}: {len(trace)} samples, working set {working} tokens, "
          f"KV {args.kv_tokens} tokens per instance x {args.instances}", flush=True)
    if emulated is not None:
        emulated = dataclasses.replace(emulated, capacity_tokens=args.kv_tokens)
        print(f"EMULATION: {emulated.name}, lengths x{length_scale:g}, time x{args.emulate_time_scale:g}", flush=True)
    run = start_run("rollout", args.out, emulated=args.emulate)
    save_trace(trace, run.file("trace.jsonl"))
    log_root = Path(f"/tmp/seer-bench-{int(time.time())}")
    log_root.mkdir(parents=True)
    # --enable-metrics: every instance, plain or seer, counts its retractions on /metrics
    engine_args = ["--max-total-tokens", str(args.kv_tokens), "--dtype", args.dtype,
                   "--enable-custom-logit-processor", "--enable-metrics"]
    cpu = not has_cuda()
    machine = f"{'GPU' if not cpu else 'CPU'} {platform.machine()}, {__import__('os').cpu_count()} cores"
    rng = random.Random(args.seed)
    measured = Measured()
    calib = None
    emulation_config = EmulationConfig(args.emulate, args.emulate_time_scale, length_scale, args.emulate_step_log)
    emulate_flags = ["--emulate", args.emulate, "--emulate-time-scale", str(args.emulate_time_scale),
                     "--emulate-length-scale", str(length_scale)] if emulated is not None else []
    if emulated is not None and args.emulate_step_log:
        emulate_flags += ["--emulate-step-log", args.emulate_step_log]
    # the plain instances get the launcher's emulation settings, and no other seer hook
    plain_env = PluginConfig(**plugin_settings(emulation_config), emulation_only=True).to_env() if emulated else {}
    plain_env.update(instance_env(emulation_config))

    # One server per (kv pool, drafter) for the seer modes ("+pool": --kv-pool file, "+sd": speculation),
    # plus plain SGLang for the baseline; the servers run in a random order, one at a time (memory).
    seer_modes = [m for m in modes if not is_plain(m)]
    plain_modes = [m for m in modes if is_plain(m)]
    servers: list[tuple[str, str, str] | None] = list(dict.fromkeys(server_config(m, args.draft) for m in seer_modes))
    if plain_modes:
        servers.append(None)
    rng.shuffle(servers)
    for server in servers:
        if server is None:
            plain_args = engine_args + instance_args(emulation_config, engine_args)
            gpu_sets = [None] * args.instances if cpu else plan_gpus(visible_gpus(), 1, args.instances)
            specs = [InstanceSpec(model_path=model_path, port=free_port(), sglang_args=plain_args, cpu=cpu,
                                  gpus=gpu_sets[i], with_plugin=emulated is not None,
                                  log_path=log_root / f"plain-{i}.log", extra_env=plain_env,
                                  cpu_threads=cpu_threads_per_instance(args.instances) if cpu else None)
                     for i in range(args.instances)]
            procs = [start_instance(s) for s in specs]
            try:
                wait_healthy(procs)
                urls = [p.url for p in procs]
                if calib is None:
                    calib = calibrate(urls, work.prompts[0], args.kv_tokens, calib_batches(args), args.calib_steps)

                def plain(mode: str, prompts: list[list[int]], rollout: list[TraceSample], tag: str,
                          replay: dict | None) -> dict:
                    if mode not in ROUTER_POLICIES:
                        return asyncio.run(run_baseline(urls, prompts, rollout, args, work.eos, replay))
                    # the router drops custom_params: a shim per instance puts each sample's back by rid
                    targets = {baseline_rid(s): sample_params(prompts[s.group_id], s, work.eos, replay)
                               for s in rollout}
                    shims = []
                    try:
                        for u in urls:
                            shims.append(ParamsShim(u).start())
                            shims[-1].params = targets
                        router = start_router([sh.url for sh in shims], ROUTER_POLICIES[mode],
                                              log_root / f"router-{tag}{mode}.log")
                        try:
                            return asyncio.run(run_baseline(urls, prompts, rollout, args, work.eos, replay,
                                                            router=router.url))
                        finally:
                            stop_router(router)
                    finally:
                        for sh in shims:
                            sh.stop()

                run_modes("plain SGLang", plain_modes, args, works, rng, measured, urls, emulated is not None, plain)
            finally:
                stop_instances(procs)
            continue
        pool, draft, budget = server
        group = [m for m in seer_modes if server_config(m, args.draft) == server]
        extra = ["--kv-pool", pool, "--draft", draft, "--draft-budget", budget, *emulate_flags]
        proc, url = seer_server(model_path, args, engine_args + extra,
                                log_root / f"pool-{pool}-draft-{draft}-budget-{budget}")
        try:
            urls = [i["url"] for i in httpx.get(f"{url}/instances").json()["instances"]]
            if calib is None:
                calib = calibrate(urls, work.prompts[0], args.kv_tokens, calib_batches(args), args.calib_steps)

            def seer(mode: str, prompts: list[list[int]], rollout: list[TraceSample], tag: str,
                     replay: dict | None) -> dict:
                return asyncio.run(run_seer(url, mode, prompts, rollout, args, work.eos, tag=tag, replay=replay))

            run_modes(f"seer {pool=} {draft=} {budget=}", group, args, works, rng, measured, urls, emulated is not None, seer)
        finally:
            proc.terminate()
            proc.wait(120)
    print(f"calibration: {json.dumps({k: v for k, v in calib.items() if k != 'step_s_by_batch'})}", flush=True)
    results = {}
    for mode in modes:
        results[mode] = summarise([metrics(run, args.instances, calib) for run in measured.runs[mode]])
        r = results[mode]
        kv = r.get("kv") or {}
        spread = r["spread"]["completion_s"]
        print(f"{mode:>13}: {r['completion_s']:7.1f} s (+-{spread['std']:.1f})  {r['throughput_tok_s']:8.0f} tok/s  "
              f"tail {r['tail_s']:6.1f} s  retractions {r['retractions']:.0f}  efficiency {r['efficiency']:.2f}  "
              f"re-prefill {kv.get('reprefill_tokens', '-')}  from pool {kv.get('pool', '-')}  "
              f"acceptance {r.get('mean_acceptance_length') or '-'}  "
              f"on target {r['repeats'][0].get('on_target_share', '-')}", flush=True)
    keys = ratio_keys(results)
    if emulated is None:
        step_model = StepModel(name=f"cpu-{args.model}", decode_base_s=calib["decode_base_s"],
                               decode_per_seq_s=calib["decode_per_seq_s"],
                               decode_per_kv_token_s=calib["decode_per_kv_token_s"],
                               prefill_per_token_s=calib["prefill_s_per_token"], capacity_tokens=args.kv_tokens,
                               request_overhead_s=calib["request_overhead_s"],
                               decode_batch_s=calib["decode_batch_s"],
                               source=f"measured by benchmarks.rollout on {machine}")
        step_model.save(run.file("step_model.json"))
    else:  # the simulator runs the very model the instances were padded to
        step_model = dataclasses.replace(emulated, request_overhead_s=calib["request_overhead_s"])
    report = {"config": {**vars(args), "context_ties": CONTEXT_TIES, "machine": machine, "samples": len(trace), "working_set_tokens": working,
                         "workload_spec": spec.__dict__, "calibration": calib, "server_order": servers},
              "modes": results, **keys,
              "sim_check": sim_check([w.trace for w in works], step_model, admission(emulation_config), args,
                                     results, [w.prompts for w in works])}
    # the smallest step: the profile's lone short step where the steps are emulated, else the engines'
    # measured batch-1 step
    step_s, step_source = ((step_model.decode_step(1, 0), "the emulated profile's decode_step(1, 0)")
                           if emulated is not None else (calib["min_step_s"], "measured batch-1 step (calibration)"))
    report["bound"] = bound(results, step_s, keys["reference"], step_source)
    report["regime"] = regime(step_model, len(trace), args.instances, statistics.fmean(s.prompt_len for s in trace),
                              statistics.fmean(s.output_len for s in trace), max(s.output_len for s in trace))
    b, g = report["bound"], report["regime"]
    print(f"reference: {keys['reference']}; critical path {b['critical_path_s']:.2f} s = {b['share']:.0%} of its "
          f"completion; regime: {g['requests_per_step']} requests per step, fixed share {g['fixed_share']:.2f}, "
          f"full over idle {g['full_over_idle']:.2f}", flush=True)
    if "note" in g:
        print(f"REGIME: {g['note']}", flush=True)
    if emulated is not None:
        per_run = [e for runs in measured.emulation.values() for e in runs]
        share = max((e["overrun_share"] for e in per_run), default=0.0)
        report["emulation"] = {
            "label": "EMULATED: real SGLang instances on a small model, every forward step padded to the "
                     f"step-time profile {args.emulate}; not a GPU measurement",
            "profile": args.emulate, "model": dataclasses.asdict(emulated), "length_scale": length_scale,
            "time_scale": args.emulate_time_scale, "per_mode": measured.emulation, "overrun_share": share,
            "valid": share <= EMULATION.max_overrun_share,
            "valid_modes": {m: max(e["overrun_share"] for e in runs) <= EMULATION.max_overrun_share
                            for m, runs in measured.emulation.items()}}
        print(f"EMULATION overrun share {share:.3f} (valid: {report['emulation']['valid']})", flush=True)
        found = targets.bounds(predict([w.trace for w in works], step_model, admission(emulation_config), args,
                                       targets.bound_modes(results), [w.prompts for w in works]))
        report["targets"] = {"bounds": found, "checks": targets.check(report, found)}
        for r in report["targets"]["checks"]:
            if r["met"] is False:
                print(f"TARGET missed: {r['mode']}: {r['target']} ({r['why'] or 'no bound to say why'})", flush=True)
    out = run.write(report)
    plot(report, {m: runs[0] for m, runs in measured.runs.items()}, run.file("plot.png"))
    print(f"wrote {out} and {run.file('plot.png')}")


if __name__ == "__main__":
    main()
