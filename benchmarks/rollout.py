"""One-run rollout benchmark: plain SGLang as trainers feed it vs seer_sglang's policies, same machine, same engines.

    python -m benchmarks.rollout --modes plain-group,plain-router,plain-router-p2,group,divided,context,oracle \
        --instances 2 --model tiny --prompts 32 --group-size 8 --max-tokens 1024 --seed 0 \
        --out benchmarks/results/cpu_tiny.json

- The plain modes are K SGLang instances started without the seer plugin, fed as trainers feed them:
  ``plain-group`` sends each prompt group whole to one instance, round-robin, its G requests together
  (veRL-style; ``baseline`` is its former name, still accepted); ``plain-sample`` sends one ``/generate``
  per sample, the instances in turn (a least-requests balancer's placement of a burst); ``plain-router`` sends one
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
import asyncio
import json
import random
import time

import httpx

from benchmarks.harness.baselines import PLAIN_SAMPLE, ROUTER_POLICIES, canonical, is_plain
from benchmarks.harness.calibration import calib_batches, calibrate
from benchmarks.harness.rollout_metrics import last_samples
from benchmarks.harness.rollout_plot import plot
from benchmarks.harness.rollout_report import Measured, build_report
from benchmarks.harness.rollout_setup import Setup, prepare
from benchmarks.harness.result import start as start_run
from benchmarks.harness.servers import seer_server
from benchmarks.harness.simulate import (mode_options, mode_speculation, run_chunk, run_draft_paths, run_draft_tokens,
                                         run_headroom, verify_layout_of)
from benchmarks.harness.sglang_router import ParamsShim, start_router, stop_router
from benchmarks.harness.telemetry import LoadPoller
from benchmarks.harness.workload import Workload, baseline_rid
from seer_sglang.config import EMULATION
from seer_sglang.launch.emulation import instance_args
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, plan_gpus, start_instance,
                                          stop_instances, visible_gpus, wait_healthy)
from seer_sglang.sim.workload import PRESETS, TraceSample, save_trace



# ---- the two kinds of run --------------------------------------------------------------------

def sample_params(ids: list[int], sample: TraceSample, eos: int, replay: dict | None) -> dict:
    """A sample's hidden target: its length, or with a recording (``--replay``) its recorded text."""
    from seer_sglang.benchmarking.force_length import custom_params

    return custom_params(len(ids), sample.output_len, eos, (replay or {}).get((sample.group_id, sample.sample_index)))


def plain_instance(index: int, sample: TraceSample, instances: int, per_sample: bool) -> int:
    """Where plain SGLang's client sends the ``index``-th request of a rollout (``sample``): its group's
    instance in turn (``plain-group``), or the next instance in turn for every sample (``plain-sample``)."""
    return (index if per_sample else sample.group_id) % instances


async def run_baseline(urls: list[str], prompts: list[list[int]], trace: list[TraceSample], args, eos: int,
                       replay: dict | None = None, router: str | None = None, per_sample: bool = False) -> dict:
    """One plain SGLang rollout: without ``router``, each group whole to one instance, round-robin, as
    veRL's classic split sends it (``plain-group``), or with ``per_sample`` each sample to the next
    instance in turn, as a least-requests balancer places a burst (``plain-sample``); with ``router``,
    one ``/generate`` per sample to the router, as slime sends them, the router choosing the instance
    (``plain-router``). The instances' caches are flushed first, as before every seer rollout, so no
    mode starts from another's prefixes."""
    from seer_sglang.benchmarking.force_length import ForceLengthProcessor

    processor = ForceLengthProcessor.to_str()
    poller = LoadPoller(urls)
    finish: list[dict] = []

    async def one(http: httpx.AsyncClient, url: str, ids: list[int], sample: TraceSample) -> None:
        body = {"input_ids": ids, "custom_logit_processor": processor, "rid": baseline_rid(sample.group_id, sample.sample_index),
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
        tasks = [one(http, router or urls[plain_instance(i, s, len(urls), per_sample)], prompts[s.group_id], s)
                 for i, s in enumerate(trace)]
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
        r = await http.post(f"{url}/scheduler", json={"name": name, "chunk_size": run_chunk(mode, args),
                                                      "whole_tail": "tail" in options,
                                                      "spread_ties": "arrival" not in options,
                                                      "kv_headroom": run_headroom(mode, args)})
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


# (kv pool, drafter, draft budget, verify layout, draft tokens, draft paths): one seer server of a run
ServerConfig = tuple[str, str, str, str, int, int]


def server_config(mode: str, args) -> ServerConfig:
    """(kv pool, drafter, draft budget, verify layout, draft tokens, draft paths) of the seer server a mode runs
    on: modes that agree share one."""
    _, options = mode_options(mode)
    return (("file" if "pool" in options else "none"), *mode_speculation(mode, args.draft), verify_layout_of(mode),
            run_draft_tokens(mode, args), run_draft_paths(mode, args))


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


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.rollout")
    ap.add_argument("--modes", default="plain-group,plain-router,plain-router-p2,group,divided,context,oracle",
                    help="plain SGLang: plain-group (each group whole to one instance, round-robin; 'baseline' "
                         "is its former name), plain-sample (one /generate per sample, the instances in turn), "
                         "plain-router (one /generate per sample through sglang-router, cache_aware), "
                         "plain-router-p2 (the router's power_of_two); the rest are seer's policies, "
                         "with options: +pool (global KV pool), +sd (grouped speculation, the adaptive budget), "
                         "+sd-fixed (every draft verified at every batch size: the GPU path's fixed verify width), "
                         "+sd-bucketed (the budget's drafts, every request padded to the step's bucket), "
                         "+sd-<drafter>, +tail, +arrival, +h<x> (the frontend's --kv-headroom x), +c<n> (chunks of n tokens), "
                         "+d<n> (--draft-tokens n), +p<n> (--draft-paths n)")
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
                    "profile (h100-70b, h100-70b-v2, moe-kimi-k2, cpu-smollm2, or a file)")
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
    return ap


class Calibration:
    """The step model's timings, taken once, on the first server the run starts."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.found: dict | None = None

    def on(self, urls: list[str]) -> None:
        if self.found is None:
            args = self.setup.args
            self.found = calibrate(urls, self.setup.works[0].prompts[0], args.kv_tokens, calib_batches(args),
                                   args.calib_steps)


def plain_router_rollout(setup: Setup, urls: list[str], mode: str, prompts: list[list[int]],
                         rollout: list[TraceSample], tag: str, replay: dict | None) -> dict:
    """One plain rollout through sglang-router. The router drops ``custom_params``: a shim per instance
    puts each sample's back by rid, and what each shim passed on is the router's placement (rid ->
    instance index) and when each request reached its instance (``arrivals``)."""
    eos = setup.works[0].eos
    targets = {baseline_rid(s.group_id, s.sample_index): sample_params(prompts[s.group_id], s, eos, replay) for s in rollout}
    shims = []
    try:
        for u in urls:
            shims.append(ParamsShim(u).start())
            shims[-1].params = targets
        router = start_router([sh.url for sh in shims], ROUTER_POLICIES[mode],
                              setup.log_root / f"router-{tag}{mode}.log")
        try:
            run = asyncio.run(run_baseline(urls, prompts, rollout, setup.args, eos, replay, router=router.url))
        finally:
            stop_router(router)
        run["placement"] = {rid: i for i, sh in enumerate(shims) for rid in sh.received}
        # when each request reached its instance, from the rollout's start
        run["arrivals"] = {rid: t - run["start"] for sh in shims for rid, t in sh.received.items()}
        return run
    finally:
        for sh in shims:
            sh.stop()


def measure_plain(setup: Setup, modes: list[str], rng: random.Random, measured: Measured, calib: Calibration) -> None:
    """K plain SGLang instances (the plugin only where it emulates), every plain mode's rollouts on them."""
    args = setup.args
    plain_args = setup.engine_args + instance_args(setup.emulation, setup.engine_args)
    gpu_sets = [None] * args.instances if setup.cpu else plan_gpus(visible_gpus(), 1, args.instances)
    specs = [InstanceSpec(model_path=setup.model_path, port=free_port(), sglang_args=plain_args, cpu=setup.cpu,
                          gpus=gpu_sets[i], with_plugin=setup.emulated is not None,
                          log_path=setup.log_root / f"plain-{i}.log", extra_env=setup.plain_env,
                          cpu_threads=cpu_threads_per_instance(args.instances) if setup.cpu else None)
             for i in range(args.instances)]
    procs = [start_instance(s) for s in specs]
    try:
        wait_healthy(procs)
        urls = [p.url for p in procs]
        calib.on(urls)

        def plain(mode: str, prompts: list[list[int]], rollout: list[TraceSample], tag: str,
                  replay: dict | None) -> dict:
            if mode in ROUTER_POLICIES:
                return plain_router_rollout(setup, urls, mode, prompts, rollout, tag, replay)
            return asyncio.run(run_baseline(urls, prompts, rollout, args, setup.works[0].eos, replay,
                                            per_sample=mode == PLAIN_SAMPLE))

        run_modes("plain SGLang", modes, args, setup.works, rng, measured, urls, setup.emulated is not None, plain)
    finally:
        stop_instances(procs)


def measure_seer(setup: Setup, server: ServerConfig, modes: list[str], rng: random.Random,
                 measured: Measured, calib: Calibration) -> None:
    """One seer server (``server_config``), the modes that run on it switched by ``POST /scheduler``."""
    args = setup.args
    pool, draft, budget, layout, tokens, paths = server
    extra = ["--kv-pool", pool, "--draft", draft, "--draft-budget", budget, "--verify-layout", layout,
             "--draft-tokens", str(tokens), "--draft-paths", str(paths), *setup.emulate_flags]
    proc, url = seer_server(setup.model_path, args, setup.engine_args + extra,
                            setup.log_root / f"pool-{pool}-draft-{draft}-budget-{budget}-{layout}-d{tokens}-p{paths}")
    try:
        urls = [i["url"] for i in httpx.get(f"{url}/instances").json()["instances"]]
        calib.on(urls)

        def seer(mode: str, prompts: list[list[int]], rollout: list[TraceSample], tag: str,
                 replay: dict | None) -> dict:
            return asyncio.run(run_seer(url, mode, prompts, rollout, args, setup.works[0].eos, tag=tag, replay=replay))

        run_modes(f"seer {pool=} {draft=} {budget=} {layout=}", modes, args, setup.works, rng, measured, urls,
                  setup.emulated is not None, seer)
    finally:
        proc.terminate()
        proc.wait(120)


def main() -> None:
    args = parser().parse_args()
    modes = list(dict.fromkeys(canonical(m) for m in args.modes.split(",")))
    if "plain-router-p2" in modes and args.instances < 2:
        raise SystemExit("plain-router-p2: sglang-router's power_of_two policy needs at least 2 instances")
    setup = prepare(args)
    run = start_run("rollout", args.out, emulated=args.emulate)
    save_trace(setup.works[0].trace, run.file("trace.jsonl"))
    rng = random.Random(args.seed)
    measured = Measured()
    calib = Calibration(setup)
    # One server per (kv pool, drafter) for the seer modes ("+pool": --kv-pool file, "+sd": speculation),
    # plus plain SGLang for the baseline; the servers run in a random order, one at a time (memory).
    seer_modes = [m for m in modes if not is_plain(m)]
    plain_modes = [m for m in modes if is_plain(m)]
    servers: list[ServerConfig | None] = list(dict.fromkeys(server_config(m, args) for m in seer_modes))
    if plain_modes:
        servers.append(None)
    rng.shuffle(servers)
    for server in servers:
        if server is None:
            measure_plain(setup, plain_modes, rng, measured, calib)
        else:
            measure_seer(setup, server, [m for m in seer_modes if server_config(m, args) == server], rng,
                         measured, calib)
    print(f"calibration: {json.dumps({k: v for k, v in calib.found.items() if k != 'step_s_by_batch'})}", flush=True)
    report = build_report(setup, modes, measured, calib.found, servers, run)
    out = run.write(report)
    plot(report, {m: runs[0] for m, runs in measured.runs.items()}, run.file("plot.png"))
    print(f"wrote {out} and {run.file('plot.png')}")


if __name__ == "__main__":
    main()
