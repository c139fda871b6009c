"""SLO requests beside a rollout: seer (credit batching, VBS admission, TTFT guard) against plain
SGLang with its priority scheduling, measured in the same run.

Each mode runs on ``--instances`` instances of the same model and flags:
- **plain**: SGLang with ``--enable-priority-scheduling``; the rollout's samples are ``/generate``
  requests spread over the instances at priority 0, the interactive ones at a higher priority (the
  fairest use of what SGLang has: they jump the queue, but share every decode step).
- **seer**: one seer server (``--draft none``); the rollout is one ``/v1/rollout``, the interactive
  requests ``/generate`` with an ``slo`` object.
While the rollout runs, interactive requests of two TPOT classes (strict and loose, in turn) arrive
as a Poisson process whose rate rises phase by phase (``sim.workload.slo_arrivals``, the schedule the
simulator replays). Each is streamed, so TTFT and TPOT are the client's own. Rollout samples run
``--max-tokens`` each, or, with ``--workload``, that workload's long-tailed lengths scaled to
``--max-tokens`` (forced by a logit processor no scheduler sees). The SLOs are set from a calibration on this machine (plain SGLang): the strict TPOT SLO
lies between what a lone request gets and what it gets beside the rollout.

Reported per mode: SLO attainment (share of admitted SLO requests that met both SLOs), per class and
per phase, admitted, rejected, goodput (SLO-meeting requests per second), and the rollout's
throughput; ``ratios.rollout_throughput`` is seer / plain. The modes run in a random order, each
``--repeats`` times, after a warm-up. CPU figures are CPU measurements; with ``--emulate`` they are
EMULATION, not GPU measurements (times are wall-clock, stretched by ``--emulate-time-scale``; rates and
SLOs are in the same stretched time). With ``--emulate`` the simulator predicts both modes from the
profile, the trace and the arrival schedule (``sim_check``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import platform
import random
import statistics
import time
from pathlib import Path

import httpx

from benchmarks.harness.manifest import load_run
from benchmarks.harness.result import start as start_run
from benchmarks.harness.emulation import emulation_counters, emulation_delta
from benchmarks.harness.servers import launch_seer
from seer_sglang.config import SCHEDULER, SLO_CONFIG, EmulationConfig, PluginConfig
from seer_sglang.core.policy import make_policy
from seer_sglang.core.slo import SLO, attainment
from seer_sglang.launch.emulation import admission, emulated_model, instance_args, instance_env
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, has_cuda,
                                          start_instance, stop_instances, wait_healthy)
from seer_sglang.launch.processes import stop_processes
from seer_sglang.models import resolve_model_path
from seer_sglang.sim.simulator import simulate
from seer_sglang.sim.workload import PRESETS, SLOArrival, TraceSample, generate, slo_arrivals

ROOT = Path(__file__).resolve().parent.parent
INTERACTIVE_PRIORITY = 10


def prompts(rng: random.Random, count: int, low: int = 16, high: int = 48) -> list[list[int]]:
    return [[rng.randrange(3, 2000) for _ in range(rng.randint(low, high))] for _ in range(count)]


async def stream_generate(http: httpx.AsyncClient, url: str, ids: list[int], max_tokens: int,
                          extra: dict) -> dict:
    """One streamed ``/generate``: status, TTFT, TPOT and tokens, as the client sees them."""
    body = {"input_ids": ids, "stream": True, **extra,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}}
    start, first, last, tokens = time.perf_counter(), None, None, 0
    try:
        async with http.stream("POST", f"{url}/generate", json=body) as r:
            if r.status_code != 200:
                await r.aread()
                return {"status": r.status_code, "start": start}
            async for line in r.aiter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                event = json.loads(line[5:])
                if "error" in event and not tokens:  # refused once the stream had begun (SGLang's form)
                    return {"status": int(event["error"].get("code") or 500), "start": start}
                n = len(event.get("output_ids") or [])
                if n > tokens:
                    now = time.perf_counter()
                    first, last, tokens = first or now, now, n
    except httpx.HTTPError as e:
        return {"status": 0, "start": start, "error": repr(e)}
    return {"status": 200, "start": start, "first": first, "last": last, "tokens": tokens}


class Rollout:
    """The rollout's prompts and each sample's length. Without a workload every sample runs
    ``max_tokens`` (``ignore_eos``); with one, each ends at its trace length (a logit processor)."""

    def __init__(self, work: list[list[int]], group: int, max_tokens: int, trace: list[TraceSample] | None,
                 eos: int | None):
        self.work, self.group, self.max_tokens, self.trace, self.eos = work, group, max_tokens, trace, eos

    def lengths(self, g: int) -> list[int]:
        if self.trace is None:
            return [self.max_tokens] * self.group
        return [s.output_len for s in self.trace if s.group_id == g]

    def sampling(self, g: int, i: int) -> dict:
        if self.trace is None:
            return {"ignore_eos": True}
        from seer_sglang.benchmarking.force_length import custom_params  # SGLang's: needed by a run only

        return {"custom_params": custom_params(len(self.work[g]), self.lengths(g)[i], self.eos)}

    def subset(self, count: int, max_tokens: int) -> "Rollout":
        trace = None if self.trace is None else [TraceSample(s.group_id, s.sample_index, s.prompt_len,
                                                             min(s.output_len, max_tokens))
                                                 for s in self.trace if s.group_id < count]
        return Rollout(self.work[:count], self.group, max_tokens, trace, self.eos)


def forced(rollout: Rollout) -> dict:
    from seer_sglang.benchmarking.force_length import ForceLengthProcessor  # SGLang's: needed by a run only

    return {} if rollout.trace is None else {"custom_logit_processor": ForceLengthProcessor.to_str()}


async def plain_rollout(http: httpx.AsyncClient, urls: list[str], rollout: Rollout) -> tuple[int, float]:
    """The rollout on plain SGLang: every sample a request, spread over the instances."""
    start = time.perf_counter()

    async def one(n: int, g: int, i: int) -> int:
        r = await http.post(f"{urls[n % len(urls)]}/generate", json={
            "input_ids": rollout.work[g], "priority": 0, **forced(rollout),
            "sampling_params": {"max_new_tokens": rollout.max_tokens, "temperature": 1.0, **rollout.sampling(g, i)}})
        r.raise_for_status()
        return len(r.json()["output_ids"])

    samples = [(g, i) for g in range(len(rollout.work)) for i in range(rollout.group)]
    tokens = await asyncio.gather(*(one(n, g, i) for n, (g, i) in enumerate(samples)))
    return sum(tokens), time.perf_counter() - start


async def seer_rollout(http: httpx.AsyncClient, url: str, rollout: Rollout) -> tuple[int, float]:
    start = time.perf_counter()
    prompts = []
    for g, ids in enumerate(rollout.work):
        prompt = {"input_ids": ids}
        if rollout.trace is not None:
            prompt["custom_params"] = [rollout.sampling(g, i)["custom_params"] for i in range(rollout.group)]
        prompts.append(prompt)
    body = {"prompts": prompts, "n": rollout.group, "max_tokens": rollout.max_tokens, "temperature": 1.0,
            "logprobs": False, **forced(rollout)}
    if rollout.trace is None:
        body["ignore_eos"] = True
    r = await http.post(f"{url}/v1/rollout", json=body)
    r.raise_for_status()
    return sum(s["completion_tokens"] for s in r.json()["samples"]), time.perf_counter() - start


def schedule(classes: dict[str, SLO], args, seed: int) -> list[SLOArrival]:
    """The interactive requests of one run, their times from the rollout's start."""
    return slo_arrivals(classes, args.rates, args.phase_s, args.lead_s, args.interactive_tokens, (8, 32), seed)


async def run_mode(mode: str, urls: list[str], args, rollout: Rollout, arrivals: list[SLOArrival],
                   seed: int) -> dict:
    """One rollout with the interactive load beside it; per-request records and the rollout's figures."""
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(1800.0), limits=limits) as http:
        start = time.perf_counter()
        if mode == "plain":
            task = asyncio.create_task(plain_rollout(http, urls, rollout))
        else:
            task = asyncio.create_task(seer_rollout(http, urls[0], rollout))
        records, tasks = [], []
        for turn, arrival in enumerate(arrivals):
            await asyncio.sleep(max(0.0, start + arrival.arrival_s - time.perf_counter()))
            if task.done():
                break
            slo = arrival.slo
            extra = ({"priority": INTERACTIVE_PRIORITY} if mode == "plain" else
                     {"slo": {"ttft_ms": slo.ttft_s * 1e3, "tpot_ms": slo.tpot_s * 1e3}})
            ids = [rng.randrange(3, 2000) for _ in range(arrival.prompt_len)]

            async def one(arrival=arrival, url=urls[turn % len(urls)], ids=ids, extra=extra):
                rec = await stream_generate(http, url, ids, arrival.output_len, extra)
                records.append({**rec, "phase": arrival.phase, "class": arrival.slo_class})

            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        tokens, elapsed = await task
    return {"records": records, "rollout_tokens": tokens, "rollout_s": elapsed,
            "rollout_throughput_tok_s": tokens / elapsed}


def score(run: dict, classes: dict[str, SLO], args) -> dict:
    """Attainment of the admitted SLO requests (both SLOs met), per class and phase; goodput."""
    def judge(rec: dict) -> bool:
        slo = classes[rec["class"]]
        return attainment(slo, rec["start"], rec["first"], rec["last"], rec["tokens"]).met

    def summary(recs: list[dict]) -> dict:
        admitted = [r for r in recs if r["status"] == 200]
        met = sum(1 for r in admitted if judge(r))
        tpots = [(r["last"] - r["first"]) / (r["tokens"] - 1) for r in admitted if r["tokens"] > 1]
        ttfts = [r["first"] - r["start"] for r in admitted if r.get("first")]
        return {"requests": len(recs), "admitted": len(admitted),
                "rejected": sum(1 for r in recs if r["status"] == 429),
                "errors": sum(1 for r in recs if r["status"] not in (200, 429)),
                "met": met, "slo_attainment": met / len(admitted) if admitted else None,
                "tpot_ms_p50": 1e3 * statistics.median(tpots) if tpots else None,
                "ttft_ms_p50": 1e3 * statistics.median(ttfts) if ttfts else None}

    recs = run["records"]
    window = args.phase_s * len(args.rates)
    return {**summary(recs), "goodput_req_s": summary(recs)["met"] / window,
            "per_class": {name: summary([r for r in recs if r["class"] == name]) for name in classes},
            "per_phase": [{"rate_req_s": rate, **summary([r for r in recs if r["phase"] == i])}
                          for i, rate in enumerate(args.rates)],
            "rollout_throughput_tok_s": run["rollout_throughput_tok_s"], "rollout_s": run["rollout_s"]}


def mean_spread(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "runs": values}


def calibrate(urls: list[str], args, rollout: Rollout) -> dict:
    """A lone request's TPOT, and its TPOT beside the rollout, on plain SGLang (no SLO anywhere)."""
    async def go() -> dict:
        async with httpx.AsyncClient(timeout=httpx.Timeout(1800.0)) as http:
            alone = await stream_generate(http, urls[0], rollout.work[0], args.interactive_tokens, {})
            task = asyncio.create_task(plain_rollout(http, urls, rollout))
            await asyncio.sleep(args.lead_s)
            beside = await stream_generate(http, urls[0], rollout.work[1], args.interactive_tokens, {})
            tokens, elapsed = await task
        tpot = lambda r: (r["last"] - r["first"]) / (r["tokens"] - 1)  # noqa: E731
        return {"alone_tpot_s": tpot(alone), "beside_tpot_s": tpot(beside), "rollout_s": elapsed,
                "rollout_tok_s": tokens / elapsed}
    return asyncio.run(go())


def slo_classes(calib: dict, args) -> dict[str, SLO]:
    strict = max(args.strict_alone_factor * calib["alone_tpot_s"], args.strict_beside_factor * calib["beside_tpot_s"])
    return {"strict": SLO(ttft_s=args.ttft_ms / 1e3, tpot_s=strict),
            "loose": SLO(ttft_s=args.ttft_ms / 1e3, tpot_s=args.loose_factor * strict)}


def predict(args, trace: list[TraceSample] | None, classes: dict[str, SLO], emulation: EmulationConfig,
            repeats: int) -> dict:
    """The simulator's account of both modes on the emulated profile: the same trace, the same arrival
    schedules, plain SGLang's spread against seer's policy with its SLO objects."""
    model = emulated_model(emulation)
    if trace is None:
        trace = [TraceSample(g, i, 32, args.max_tokens) for g in range(args.prompts) for i in range(args.group_size)]
    out = {}
    for mode in ("plain", "seer"):
        runs = []
        for i in range(repeats):
            policy = (make_policy("round-robin") if mode == "plain" else
                      make_policy(SCHEDULER.name, **{**SCHEDULER.policy_kwargs(), "chunk_size": args.chunk_size}))
            r = simulate(trace, policy, model, args.instances, args.max_tokens, admission=admission(emulation),
                         slo_traffic=schedule(classes, args, args.seed + i), slo_mechanism=mode == "seer",
                         slo_headroom=args.slo_headroom, plain=mode == "plain")
            slo = r.slo or {"slo_attainment": None, "admitted": 0, "rejected": 0, "per_class": {},
                            "best_effort_deferred_share": 0.0}  # no SLO request arrived
            runs.append({"slo_attainment": slo["slo_attainment"], "admitted": slo["admitted"],
                         "rejected": slo["rejected"], "rollout_throughput_tok_s": r.throughput_tok_s,
                         "per_class": slo["per_class"], "best_effort_deferred_share": slo["best_effort_deferred_share"]})
        admitted = sum(r["admitted"] for r in runs)
        out[mode] = {"slo_attainment": (sum((r["slo_attainment"] or 0) * r["admitted"] for r in runs) / admitted
                                        if admitted else None),
                     "admitted": admitted, "rejected": sum(r["rejected"] for r in runs),
                     "rollout_throughput_tok_s": statistics.fmean(r["rollout_throughput_tok_s"] for r in runs),
                     "runs": runs}
    out["ratios"] = {"rollout_throughput": out["seer"]["rollout_throughput_tok_s"]
                     / out["plain"]["rollout_throughput_tok_s"]}
    return out


def frontier(args, trace: list[TraceSample] | None, calib: dict, emulation: EmulationConfig) -> list[dict]:
    """The trade the simulator predicts as the strict TPOT SLO loosens (``--sim-sweep``, as factors of
    the TPOT a request gets beside the rollout on plain SGLang): attainment of both modes and seer's
    rollout throughput over plain's."""
    rows = []
    for factor in args.sim_sweep:
        swept = argparse.Namespace(**{**vars(args), "strict_beside_factor": factor, "strict_alone_factor": 0.0})
        p = predict(args, trace, slo_classes(calib, swept), emulation, 1)
        rows.append({"strict_beside_factor": factor, "plain_attainment": p["plain"]["slo_attainment"],
                     "seer_attainment": p["seer"]["slo_attainment"], "seer_rejected": p["seer"]["rejected"],
                     "rollout_throughput_ratio": p["ratios"]["rollout_throughput"]})
    return rows


def load_frontier(args, trace: list[TraceSample] | None, classes: dict[str, SLO], emulation: EmulationConfig,
                  at_run_load: dict) -> list[dict]:
    """The trade the simulator predicts as the interactive load changes (``--sim-load-scales``: the
    arrival rates of every phase times each scale; 0 is the rollout alone, which prices seer's chunked
    rollout apart from the SLO mechanism), at the measured run's SLO classes; ``at_run_load`` is
    ``predict``'s account at scale 1, already made."""
    rows = []
    for scale in args.sim_load_scales:
        scaled = argparse.Namespace(**{**vars(args), "rates": [r * scale for r in args.rates]})
        p = at_run_load if scale == 1.0 else predict(scaled, trace, classes, emulation, args.repeats)
        rows.append({"load_scale": scale, "rates": scaled.rates, "requests": p["seer"]["admitted"] + p["seer"]["rejected"],
                     "plain_attainment": p["plain"]["slo_attainment"], "seer_attainment": p["seer"]["slo_attainment"],
                     "seer_rejected": p["seer"]["rejected"],
                     "best_effort_deferred_share": statistics.fmean(r["best_effort_deferred_share"]
                                                                    for r in p["seer"]["runs"]),
                     "rollout_throughput_ratio": p["ratios"]["rollout_throughput"]})
    return rows


def rollout_of(args, model: str, rng: random.Random | None = None) -> Rollout:
    """The rollout a run sends: its prompts (drawn from ``rng``, by default seeded with ``--seed``), and
    with ``--workload`` the hidden target lengths."""
    work = prompts(rng or random.Random(args.seed), args.prompts)
    trace, eos = None, None
    if args.workload:
        from transformers import AutoTokenizer

        spec = PRESETS[args.workload]
        shape = dataclasses.replace(spec.scaled(args.max_tokens), group_size=args.group_size)
        trace = [TraceSample(s.group_id, s.sample_index, len(work[s.group_id]), s.output_len)
                 for s in generate(shape, args.prompts, args.seed)]
        eos = AutoTokenizer.from_pretrained(model).eos_token_id
    return Rollout(work, args.group_size, args.max_tokens, trace, eos)


def length_scale_of(args) -> float:
    return args.max_tokens / PRESETS[args.workload].max_tokens if args.workload else 1.0


def sim_check_of(args, rollout: Rollout, classes: dict[str, SLO], calib: dict) -> dict:
    emulation = EmulationConfig(args.emulate, args.emulate_time_scale, length_scale_of(args))
    at_run_load = predict(args, rollout.trace, classes, emulation, args.repeats)
    return {**at_run_load, "frontier": frontier(args, rollout.trace, calib, emulation),
            "load_frontier": load_frontier(args, rollout.trace, classes, emulation, at_run_load)}


def resimulate(name: str, args) -> None:
    """Redo an emulated run's simulator account (``sim_check``) with this code, from the run's own
    configuration and calibration (``--sim-load-scales`` where the run had none), and print it: a view of
    the run, not part of it, so its result is not rewritten."""
    result = load_run(name)
    saved = argparse.Namespace(**{"sim_load_scales": args.sim_load_scales, **result["config"]})
    classes = {n: SLO(ttft_s=c["ttft_ms"] / 1e3, tpot_s=c["tpot_ms"] / 1e3) for n, c in result["slo_classes"].items()}
    check = sim_check_of(saved, rollout_of(saved, resolve_model_path(saved.model)), classes, result["calibration"])
    print(json.dumps({"run": str(name), "config": vars(saved), "sim_check": check}, indent=1))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for mode, style in (("plain", "o--"), ("seer", "s-")):
        runs = result["runs"].get(mode, [])
        if not runs:
            continue
        rates = [p["rate_req_s"] for p in runs[0]["per_phase"]]
        att = [statistics.fmean([r["per_phase"][i]["slo_attainment"] or 0.0 for r in runs]) for i in range(len(rates))]
        ax1.plot(rates, att, style, label=mode)
    ax1.axhline(0.95, color="grey", lw=0.8)
    ax1.set(xlabel="interactive arrival rate (req/s)", ylabel="SLO attainment of admitted", ylim=(0, 1.05))
    ax1.legend()
    modes = [m for m in ("plain", "seer") if m in result["modes"]]
    ax2.bar(modes, [result["modes"][m]["rollout_throughput_tok_s"]["mean"] for m in modes])
    ax2.set(ylabel="rollout throughput (tok/s)")
    fig.suptitle(f"{result['hardware']}: SLO requests beside a rollout")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--model", default="tiny")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "slo_cpu.json"))
    p.add_argument("--emulate", default=None, help="EMULATION: pad every instance's steps to this profile")
    p.add_argument("--emulate-time-scale", type=float, default=EmulationConfig.time_scale)
    p.add_argument("--workload", default=None, choices=sorted(PRESETS),
                   help="rollout lengths of this workload's shape, scaled to --max-tokens (default: all --max-tokens)")
    p.add_argument("--prompts", type=int, default=64, help="rollout prompts")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per rollout sample")
    p.add_argument("--interactive-tokens", type=int, default=32)
    p.add_argument("--rates", type=float, nargs="+", default=[0.5, 1.0, 2.0], help="interactive req/s per phase")
    p.add_argument("--phase-s", type=float, default=8.0)
    p.add_argument("--lead-s", type=float, default=3.0, help="seconds the rollout runs before interactive load")
    p.add_argument("--ttft-ms", type=float, default=2000.0)
    p.add_argument("--strict-alone-factor", type=float, default=2.5)
    p.add_argument("--strict-beside-factor", type=float, default=0.5)
    p.add_argument("--loose-factor", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--slo-headroom", type=float, default=SLO_CONFIG.headroom, help="seer's --slo-headroom")
    p.add_argument("--chunk-size", type=int, default=SCHEDULER.chunk_size, help="seer's --chunk-size")
    p.add_argument("--sim-sweep", type=float, nargs="+", default=[0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
                   help="with --emulate: strict TPOT SLOs (x the TPOT beside the rollout) the simulator sweeps")
    p.add_argument("--sim-load-scales", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0],
                   help="with --emulate: interactive loads (x --rates) the simulator sweeps; 0: the rollout alone")
    p.add_argument("--resimulate", default=None, metavar="RESULT.json",
                   help="only redo the simulator account of an emulated run, from its config and calibration, "
                        "and print it (the run's result is left as it was written)")
    p.add_argument("--log-dir", default="/tmp/seer_slo_logs")
    args = p.parse_args()
    if args.resimulate:
        resimulate(args.resimulate, args)
        return
    run = start_run("slo", args.out, emulated=args.emulate)

    model = resolve_model_path(args.model)
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)  # the prompts, then the order of the modes
    rollout = rollout_of(args, model, rng)
    trace, length_scale = rollout.trace, length_scale_of(args)
    cpu = not has_cuda()
    emulation = EmulationConfig(args.emulate, args.emulate_time_scale, length_scale)
    sglang_args = ["--sleep-on-idle", *(["--enable-custom-logit-processor"] if trace else [])]
    plain_env = {**PluginConfig(emulate=args.emulate, emulate_time_scale=args.emulate_time_scale,
                                emulate_length_scale=length_scale, emulation_only=True).to_env(),
                 **instance_env(emulation)} if args.emulate else {}
    specs = [InstanceSpec(model_path=model, port=free_port(), cpu=cpu, with_plugin=bool(args.emulate),
                          sglang_args=[*sglang_args, "--enable-priority-scheduling",
                                       *instance_args(emulation, sglang_args)],
                          log_path=log_dir / f"plain-{i}.log", extra_env=plain_env,
                          cpu_threads=cpu_threads_per_instance(args.instances) if cpu else None)
             for i in range(args.instances)]
    seer_flags = ["--num-instances", str(args.instances), "--draft", "none", "--slo-headroom",
                  str(args.slo_headroom), *(["--chunk-size", str(args.chunk_size)] if args.chunk_size else []),
                  *sglang_args]
    if args.emulate:
        seer_flags += ["--emulate", args.emulate, "--emulate-time-scale", str(args.emulate_time_scale),
                       "--emulate-length-scale", str(length_scale)]

    calib, classes, runs = None, None, {"plain": [], "seer": []}
    order = [m for _ in range(args.repeats) for m in ("plain", "seer")]
    rng.shuffle(order)
    # calibration needs plain SGLang: it runs first, then the repeats in their random order
    order.remove("plain")
    order.insert(0, "plain")
    for i, mode in enumerate(order):
        seer_proc, plain_procs = None, []
        try:
            if mode == "plain":
                plain_procs = [start_instance(s) for s in specs]
                wait_healthy(plain_procs, timeout_s=900, progress=False)
                urls = [pr.url for pr in plain_procs]
            else:
                seer_proc, url = launch_seer(model, seer_flags, log_dir / f"seer-{i}")
                urls = [url]
            if calib is None:
                calib = calibrate(urls, args, rollout)
                classes = slo_classes(calib, args)
                print(f"[calibration] {json.dumps(calib)}; strict TPOT SLO {classes['strict'].tpot_s * 1e3:.1f} ms",
                      flush=True)
            else:  # warm-up: a short rollout and an SLO request (seer's instances fit their step times)
                warm = argparse.Namespace(**{**vars(args), "rates": [1.0], "phase_s": 2.0, "lead_s": 1.0})
                asyncio.run(run_mode(mode, urls, warm, rollout.subset(4, 64), schedule(classes, warm, args.seed + 1000),
                                     args.seed + 1000 + i))
                time.sleep(2.0)
            instance_urls = (urls if mode == "plain" else
                             [x["url"] for x in httpx.get(f"{urls[0]}/instances", timeout=30).json()["instances"]])
            before = emulation_counters(instance_urls) if args.emulate else []
            repeat = len(runs[mode])  # both modes get the same arrival schedule in the same repeat
            run = asyncio.run(run_mode(mode, urls, args, rollout, schedule(classes, args, args.seed + repeat),
                                       args.seed + repeat))
            scored = score(run, classes, args)
            if args.emulate:
                scored["emulation"] = emulation_delta(before, emulation_counters(instance_urls))
            runs[mode].append(scored)
            print(f"[{mode}] attainment {scored['slo_attainment']}, admitted {scored['admitted']}, rejected "
                  f"{scored['rejected']}, rollout {scored['rollout_throughput_tok_s']:.0f} tok/s", flush=True)
        finally:
            if seer_proc is not None:
                stop_processes([seer_proc], grace_s=60)
            stop_instances(plain_procs)

    modes = {}
    for mode, mode_runs in runs.items():
        if not mode_runs:
            continue
        admitted = sum(r["admitted"] for r in mode_runs)
        modes[mode] = {"slo_attainment": sum(r["met"] for r in mode_runs) / admitted if admitted else None,
                       "admitted": admitted, "rejected": sum(r["rejected"] for r in mode_runs),
                       "errors": sum(r["errors"] for r in mode_runs),
                       "goodput_req_s": mean_spread([r["goodput_req_s"] for r in mode_runs]),
                       "rollout_throughput_tok_s": mean_spread([r["rollout_throughput_tok_s"] for r in mode_runs]),
                       "emulation_overrun_share": (max(r["emulation"]["overrun_share"] for r in mode_runs)
                                                   if args.emulate else None),
                       "per_class": {name: {"admitted": sum(r["per_class"][name]["admitted"] for r in mode_runs),
                                            "rejected": sum(r["per_class"][name]["rejected"] for r in mode_runs),
                                            "slo_attainment": (sum(r["per_class"][name]["met"] for r in mode_runs)
                                                               / max(1, sum(r["per_class"][name]["admitted"]
                                                                            for r in mode_runs)))}
                                     for name in classes}}
    ratio = (modes["seer"]["rollout_throughput_tok_s"]["mean"] / modes["plain"]["rollout_throughput_tok_s"]["mean"]
             if "seer" in modes and "plain" in modes else None)
    sim_check = None
    if args.emulate:
        sim_check = sim_check_of(args, rollout, classes, calib)
    hardware = (f"EMULATED {args.emulate} (not a GPU measurement)" if args.emulate else
                f"CPU, measured (not a GPU figure), {platform.machine()}")
    result = {"benchmark": "slo", "hardware": hardware,
              "config": {**{k: v for k, v in vars(args).items() if k not in ("out", "log_dir")},
                         "paired_schedules": True},
              "calibration": calib,
              "slo_classes": {n: {"ttft_ms": s.ttft_s * 1e3, "tpot_ms": s.tpot_s * 1e3} for n, s in classes.items()},
              "modes": modes, "ratios": {"rollout_throughput": ratio}, "runs": runs, "sim_check": sim_check,
              "valid": not args.emulate or all(m["emulation_overrun_share"] <= 0.05 for m in modes.values()),
              "goal": {"seer_attainment_ge_95": (modes["seer"]["slo_attainment"] or 0) >= 0.95,
                       "plain_attainment_lt_50": (modes["plain"]["slo_attainment"] or 0) < 0.5,
                       "rollout_loss_le_10": ratio is not None and ratio >= 0.9}}
    out = run.write(result)
    plot(result, run.file("plot.png"))
    print(json.dumps({"modes": {m: {k: v for k, v in d.items() if k != "per_class"} for m, d in modes.items()},
                      "ratios": result["ratios"], "goal": result["goal"]}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
