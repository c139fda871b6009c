"""SLO requests beside a rollout: seer (credit batching, VBS admission, TTFT guard) against plain
SGLang with its priority scheduling, measured in the same run.

Each mode runs on ``--instances`` instances of the same model and flags:
- **plain**: SGLang with ``--enable-priority-scheduling``; the rollout's samples are ``/generate``
  requests spread over the instances at priority 0, the interactive ones at a higher priority (the
  fairest use of what SGLang has: they jump the queue, but share every decode step).
- **seer**: one seer server (``--draft none``); the rollout is one ``/v1/rollout``, the interactive
  requests ``/generate`` with an ``slo`` object.
While the rollout runs, interactive requests of two TPOT classes (strict and loose, half each) arrive
as a Poisson process whose rate rises phase by phase. Each is streamed, so TTFT and TPOT are the
client's own. The SLOs are set from a calibration on this machine (plain SGLang): the strict TPOT SLO
lies between what a lone request gets and what it gets beside the rollout.

Reported per mode: SLO attainment (share of admitted SLO requests that met both SLOs), per class and
per phase, admitted, rejected, goodput (SLO-meeting requests per second), and the rollout's
throughput; ``ratios.rollout_throughput`` is seer / plain. The modes run in a random order, each
``--repeats`` times, after a warm-up. CPU figures are CPU measurements; with ``--emulate`` they are
EMULATION, not GPU measurements.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import statistics
import time
from pathlib import Path

import httpx

from benchmarks.rollout import launch_seer
from seer_sglang.config import SLO_CONFIG, EmulationConfig, PluginConfig
from seer_sglang.core.slo import SLO, attainment
from seer_sglang.launch.emulation import instance_args, instance_env
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, has_cuda,
                                          start_instance, stop_instances, wait_healthy)
from seer_sglang.launch.processes import stop_processes
from seer_sglang.models import resolve_model_path

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
                n = len(json.loads(line[5:]).get("output_ids") or [])
                if n > tokens:
                    now = time.perf_counter()
                    first, last, tokens = first or now, now, n
    except httpx.HTTPError as e:
        return {"status": 0, "start": start, "error": repr(e)}
    return {"status": 200, "start": start, "first": first, "last": last, "tokens": tokens}


async def plain_rollout(http: httpx.AsyncClient, urls: list[str], work: list[list[int]], group: int,
                        max_tokens: int) -> tuple[int, float]:
    """The rollout on plain SGLang: every sample a request, spread over the instances."""
    start = time.perf_counter()

    async def one(i: int, ids: list[int]) -> int:
        r = await http.post(f"{urls[i % len(urls)]}/generate", json={
            "input_ids": ids, "priority": 0,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True}})
        r.raise_for_status()
        return len(r.json()["output_ids"])

    samples = [ids for ids in work for _ in range(group)]
    tokens = await asyncio.gather(*(one(i, ids) for i, ids in enumerate(samples)))
    return sum(tokens), time.perf_counter() - start


async def seer_rollout(http: httpx.AsyncClient, url: str, work: list[list[int]], group: int,
                       max_tokens: int) -> tuple[int, float]:
    start = time.perf_counter()
    r = await http.post(f"{url}/v1/rollout", json={"prompts": [{"input_ids": p} for p in work], "n": group,
                                                   "max_tokens": max_tokens, "temperature": 1.0,
                                                   "ignore_eos": True, "logprobs": False})
    r.raise_for_status()
    return sum(s["completion_tokens"] for s in r.json()["samples"]), time.perf_counter() - start


async def run_mode(mode: str, urls: list[str], args, work: list[list[int]], classes: dict[str, SLO],
                   seed: int) -> dict:
    """One rollout with the interactive load beside it; per-request records and the rollout's figures."""
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(1800.0), limits=limits) as http:
        if mode == "plain":
            rollout = asyncio.create_task(plain_rollout(http, urls, work, args.group_size, args.max_tokens))
        else:
            rollout = asyncio.create_task(seer_rollout(http, urls[0], work, args.group_size, args.max_tokens))
        await asyncio.sleep(args.lead_s)  # the rollout's prefills are done: its decode batch is full
        records, tasks, turn = [], [], 0
        for phase, rate in enumerate(args.rates):
            end = time.perf_counter() + args.phase_s
            while time.perf_counter() < end and not rollout.done():
                await asyncio.sleep(rng.expovariate(rate))
                name = list(classes)[turn % len(classes)]
                turn += 1
                slo = classes[name]
                extra = ({"priority": INTERACTIVE_PRIORITY} if mode == "plain" else
                         {"slo": {"ttft_ms": slo.ttft_s * 1e3, "tpot_ms": slo.tpot_s * 1e3}})
                url = urls[turn % len(urls)]
                ids = prompts(rng, 1, 8, 32)[0]

                async def one(phase=phase, name=name, url=url, ids=ids, extra=extra):
                    rec = await stream_generate(http, url, ids, args.interactive_tokens, extra)
                    records.append({**rec, "phase": phase, "class": name})

                tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        tokens, elapsed = await rollout
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


def calibrate(urls: list[str], args, work: list[list[int]]) -> dict:
    """A lone request's TPOT, and its TPOT beside the rollout, on plain SGLang (no SLO anywhere)."""
    async def go() -> dict:
        async with httpx.AsyncClient(timeout=httpx.Timeout(1800.0)) as http:
            alone = await stream_generate(http, urls[0], work[0], args.interactive_tokens, {})
            rollout = asyncio.create_task(plain_rollout(http, urls, work, args.group_size, args.max_tokens))
            await asyncio.sleep(args.lead_s)
            beside = await stream_generate(http, urls[0], work[1], args.interactive_tokens, {})
            tokens, elapsed = await rollout
        tpot = lambda r: (r["last"] - r["first"]) / (r["tokens"] - 1)  # noqa: E731
        return {"alone_tpot_s": tpot(alone), "beside_tpot_s": tpot(beside), "rollout_s": elapsed,
                "rollout_tok_s": tokens / elapsed}
    return asyncio.run(go())


def slo_classes(calib: dict, args) -> dict[str, SLO]:
    strict = max(args.strict_alone_factor * calib["alone_tpot_s"], args.strict_beside_factor * calib["beside_tpot_s"])
    return {"strict": SLO(ttft_s=args.ttft_ms / 1e3, tpot_s=strict),
            "loose": SLO(ttft_s=args.ttft_ms / 1e3, tpot_s=args.loose_factor * strict)}


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
    p.add_argument("--log-dir", default="/tmp/seer_slo_logs")
    args = p.parse_args()

    rng = random.Random(args.seed)
    model = resolve_model_path(args.model)
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    work = prompts(rng, args.prompts)
    cpu = not has_cuda()
    emulation = EmulationConfig(args.emulate, args.emulate_time_scale)
    sglang_args = ["--sleep-on-idle"]
    plain_env = {**PluginConfig(emulate=args.emulate, emulate_time_scale=args.emulate_time_scale,
                                emulation_only=True).to_env(), **instance_env(emulation)} if args.emulate else {}
    specs = [InstanceSpec(model_path=model, port=free_port(), cpu=cpu, with_plugin=bool(args.emulate),
                          sglang_args=[*sglang_args, "--enable-priority-scheduling",
                                       *instance_args(emulation, sglang_args)],
                          log_path=log_dir / f"plain-{i}.log", extra_env=plain_env,
                          cpu_threads=cpu_threads_per_instance(args.instances) if cpu else None)
             for i in range(args.instances)]
    seer_flags = ["--num-instances", str(args.instances), "--draft", "none", "--slo-headroom",
                  str(args.slo_headroom), *sglang_args]
    if args.emulate:
        seer_flags += ["--emulate", args.emulate, "--emulate-time-scale", str(args.emulate_time_scale)]

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
                calib = calibrate(urls, args, work)
                classes = slo_classes(calib, args)
                print(f"[calibration] {json.dumps(calib)}; strict TPOT SLO {classes['strict'].tpot_s * 1e3:.1f} ms",
                      flush=True)
            else:  # warm-up: a short rollout and an SLO request (seer's instances fit their step times)
                asyncio.run(run_mode(mode, urls, argparse.Namespace(**{**vars(args), "rates": [1.0], "phase_s": 2.0,
                                                                        "max_tokens": 64, "lead_s": 1.0}),
                                     work[:4], classes, args.seed + 1000 + i))
                time.sleep(2.0)
            run = asyncio.run(run_mode(mode, urls, args, work, classes, args.seed + i))
            scored = score(run, classes, args)
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
                       "per_class": {name: {"admitted": sum(r["per_class"][name]["admitted"] for r in mode_runs),
                                            "rejected": sum(r["per_class"][name]["rejected"] for r in mode_runs),
                                            "slo_attainment": (sum(r["per_class"][name]["met"] for r in mode_runs)
                                                               / max(1, sum(r["per_class"][name]["admitted"]
                                                                            for r in mode_runs)))}
                                     for name in classes}}
    ratio = (modes["seer"]["rollout_throughput_tok_s"]["mean"] / modes["plain"]["rollout_throughput_tok_s"]["mean"]
             if "seer" in modes and "plain" in modes else None)
    hardware = (f"EMULATED {args.emulate} (not a GPU measurement)" if args.emulate else
                f"CPU, measured (not a GPU figure), {platform.machine()}")
    result = {"benchmark": "slo", "hardware": hardware, "machine": platform.node(),
              "config": {k: v for k, v in vars(args).items() if k not in ("out", "log_dir")},
              "calibration": calib,
              "slo_classes": {n: {"ttft_ms": s.ttft_s * 1e3, "tpot_ms": s.tpot_s * 1e3} for n, s in classes.items()},
              "modes": modes, "ratios": {"rollout_throughput": ratio}, "runs": runs,
              "goal": {"seer_attainment_ge_95": (modes["seer"]["slo_attainment"] or 0) >= 0.95,
                       "plain_attainment_lt_50": (modes["plain"]["slo_attainment"] or 0) < 0.5,
                       "rollout_loss_le_10": ratio is not None and ratio >= 0.9}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    plot(result, out.with_suffix(".png"))
    print(json.dumps({"modes": {m: {k: v for k, v in d.items() if k != "per_class"} for m, d in modes.items()},
                      "ratios": result["ratios"], "goal": result["goal"]}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
