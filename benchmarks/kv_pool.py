"""The global KV pool on long generated contexts: load vs recompute, and a rollout whose samples move.

    python -m benchmarks.kv_pool --model tiny --contexts 1024,2048,4096 --repeats 3 \\
        --out benchmarks/results/kv_pool_cpu_tiny.json

Two seer servers run side by side, each with 2 instances: ``context+pool`` (``--kv-pool file``) and
``context`` (``--kv-pool none``). Both are warmed first.

1. **Load vs recompute.** For each context length, a fresh context (random prompt + generated
   tokens) is generated on instance A of each server; then its continuation (1 new token) runs on
   instance B, which never saw it. With the pool, B loads every whole page; without, it prefills the
   whole context. The continuation's end-to-end latency is the move's cost, measured.
2. **Rollout with forced moves.** The same rollout runs on each server (order random per repeat);
   once every sample has generated ``--kill-at`` of its tokens, one instance is killed and its
   samples finish on the survivor (the server restarts between repeats). Reported: completion time,
   tokens the moved samples loaded from the pool or recomputed, and the tokens, which must be equal.
   An undisturbed rollout of each server gives the recompute totals when nothing moves.

All figures are measured on this machine (CPU unless a GPU is present) and labelled so.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from pathlib import Path

import httpx

from benchmarks.harness.result import start as start_run
from benchmarks.harness.servers import seer_server
from seer_sglang.benchmarking.kill import chunk_tokens_done, kill_instance, moved_chunks
from seer_sglang.launch.instances import has_cuda
from seer_sglang.launch.processes import stop_processes
from seer_sglang.models import resolve_model_path

PAGE = 16


def instance_urls(url: str) -> list[str]:
    return [i["url"] for i in httpx.get(f"{url}/instances", timeout=10).json()["instances"]]


def generate(url: str, ids: list[int], n: int) -> dict:
    r = httpx.post(f"{url}/generate", timeout=1800, json={"input_ids": ids, "sampling_params": {
        "max_new_tokens": n, "temperature": 0, "ignore_eos": True}})
    r.raise_for_status()
    return r.json()


def move_cost(url: str, context: int, rng: random.Random) -> dict:
    """Generate a fresh context on instance A, then time its 1-token continuation on instance B."""
    a, b = instance_urls(url)
    prompt = [rng.randrange(5, 1500) for _ in range(64)]
    ids = prompt + generate(a, prompt, context - len(prompt))["output_ids"]
    start = time.perf_counter()
    out = generate(b, ids, 1)
    seconds = time.perf_counter() - start
    details = out["meta_info"].get("cached_tokens_details") or {}
    return {"context": len(ids), "seconds": seconds, "pool_tokens": int(details.get("storage") or 0),
            "cached_tokens": int(out["meta_info"].get("cached_tokens") or 0)}


def rollout(url: str, prompts: list[list[int]], max_tokens: int, kill_at: float | None = None, proc=None,
            n: int = 1) -> dict:
    """One temperature-0 rollout; with ``kill_at``, one instance of the server ``proc`` is killed once
    that share of the tokens is generated. ``outputs`` maps ``"prompt/sample"`` to its tokens."""
    body = {"prompts": [{"input_ids": p} for p in prompts], "n": n, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    box: dict = {}
    start = time.perf_counter()
    worker = threading.Thread(target=lambda: box.update(r=httpx.post(f"{url}/v1/rollout", json=body, timeout=3600)))
    worker.start()
    victim = None
    if kill_at is not None:
        want = kill_at * max_tokens * len(prompts)
        while worker.is_alive() and chunk_tokens_done(url) < want:
            time.sleep(0.05)
        victim = kill_instance(url, proc.pid)
    worker.join()
    seconds = time.perf_counter() - start
    r = box["r"]
    r.raise_for_status()
    out = r.json()
    moved = {"samples": 0, "context": 0, "pool": 0, "device": 0, "recomputed": 0}
    for _, chunk in moved_chunks(out["samples"], victim) if victim is not None else []:
        moved["samples"] += 1
        moved["context"] += sum(chunk["kv"].values())
        for key in ("pool", "device", "recomputed"):
            moved[key] += chunk["kv"][key]
    return {"seconds": seconds, "kv": out["summary"]["kv"], "moved": moved,
            "outputs": {f"{s['prompt_index']}/{s['index']}": s["output_ids"] for s in out["samples"]}}


def stats(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": values}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    lengths = sorted(int(k) for k in report["move_cost"]["context+pool"])
    for mode, style in (("context+pool", "o-"), ("context", "s--")):
        means = [report["move_cost"][mode][str(n)]["seconds"]["mean"] for n in lengths]
        ax1.plot(lengths, means, style, label=mode + (" (load)" if "pool" in mode else " (recompute)"))
    ax1.set_xlabel("context tokens moved")
    ax1.set_ylabel("continuation latency on the new instance (s)")
    ax1.set_title("Moving one sample")
    ax1.legend()
    killed = {m: r["killed"]["seconds"] for m, r in report["rollout"].items()}
    mode_bars(ax2, killed, "rollout completion (s)", "Rollout, one of 2 instances killed")
    save(fig, f"Global KV pool, {report['device']} ({report['model']}), measured", path)


def mode_bars(ax, by_mode: dict[str, dict], ylabel: str, title: str = "") -> None:
    """One bar per mode: the mean of its repeats, the standard deviation as error bar."""
    modes = list(by_mode)
    ax.bar(modes, [by_mode[m]["mean"] for m in modes], yerr=[by_mode[m]["stdev"] for m in modes],
           color=["tab:blue", "tab:gray", "tab:orange"][: len(modes)])
    ax.set_ylabel(ylabel)
    ax.set_title(title)


def save(fig, title: str, path: Path) -> None:
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--contexts", default="1024,2048,4096")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--chunk-size", type=int, default=256)
    ap.add_argument("--kill-at", type=float, default=0.5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--log-dir", default="/tmp/seer-bench-kv-pool")
    ap.add_argument("--out", default="benchmarks/results/kv_pool_cpu.json")
    args = ap.parse_args()
    run = start_run("kv_pool", args.out)
    args.instances = 2
    rng = random.Random(args.seed)
    model = str(resolve_model_path(args.model))
    logs = Path(args.log_dir)
    engine = ["--dtype", args.dtype, "--scheduler", "context"]
    modes = {"context+pool": ["--kv-pool", "file"], "context": ["--kv-pool", "none"]}
    contexts = [int(x) for x in args.contexts.split(",")]
    prompts = [[rng.randrange(5, 1500) for _ in range(128)] for _ in range(args.prompts)]
    report = {"device": "GPU" if has_cuda() else "CPU", "model": args.model,
              "measured": True, "emulated": False, "args": vars(args), "move_cost": {}, "rollout": {}}

    def start(mode: str, tag: str):
        return seer_server(model, args, engine + modes[mode], logs / f"{mode}-{tag}")

    servers = {m: start(m, "moves") for m in modes}
    try:
        for mode, (_, url) in servers.items():  # warm both: compile paths, first prefill, pool directory
            move_cost(url, 256, rng)
        samples: dict[str, dict[int, list[dict]]] = {m: {n: [] for n in contexts} for m in modes}
        for _ in range(args.repeats):
            for n in contexts:
                order = list(modes)
                rng.shuffle(order)
                for mode in order:
                    samples[mode][n].append(move_cost(servers[mode][1], n, rng))
        for mode in modes:
            report["move_cost"][mode] = {str(n): {
                "seconds": stats([s["seconds"] for s in samples[mode][n]]),
                "pool_tokens": stats([s["pool_tokens"] for s in samples[mode][n]]),
                "cached_tokens": stats([s["cached_tokens"] for s in samples[mode][n]])} for n in contexts}
        # Nothing moves: what each server recomputes over one undisturbed rollout.
        for mode, (_, url) in servers.items():
            run = rollout(url, prompts, args.max_tokens, None)
            report["rollout"].setdefault(mode, {})["undisturbed"] = {"seconds": run["seconds"], "kv": run["kv"]}
            report["rollout"][mode]["reference_outputs"] = run["outputs"]
    finally:
        stop_processes([p for p, _ in servers.values()])

    killed: dict[str, list[dict]] = {m: [] for m in modes}
    for r in range(args.repeats):
        order = list(modes)
        rng.shuffle(order)
        for mode in order:
            proc, url = start(mode, f"kill-{r}")
            try:
                rollout(url, prompts[:2], 64, None)  # warm
                killed[mode].append(rollout(url, prompts, args.max_tokens, args.kill_at, proc))
            finally:
                stop_processes([proc])
    reference = report["rollout"]["context"].pop("reference_outputs")
    report["rollout"]["context+pool"].pop("reference_outputs")
    for mode in modes:
        runs = killed[mode]
        report["rollout"][mode]["killed"] = {
            "seconds": stats([k["seconds"] for k in runs]),
            "moved": runs,
            "identical_tokens": all(k["outputs"][i] == reference[i] for k in runs for i in k["outputs"]),
        }
        for k in runs:
            k.pop("outputs")
    pool, plain = report["rollout"]["context+pool"], report["rollout"]["context"]
    report["ratios"] = {
        "killed_completion_pool_over_none": pool["killed"]["seconds"]["mean"] / plain["killed"]["seconds"]["mean"],
        "undisturbed_recomputed_pool_over_none": (pool["undisturbed"]["kv"]["recomputed"]
                                                  / max(1, plain["undisturbed"]["kv"]["recomputed"])),
        "move_latency_load_over_recompute": {str(n): report["move_cost"]["context+pool"][str(n)]["seconds"]["mean"]
                                             / report["move_cost"]["context"][str(n)]["seconds"]["mean"]
                                             for n in contexts},
    }
    run.write(report)
    plot(report, run.file("plot.png"))
    print(json.dumps(report["ratios"], indent=1))


if __name__ == "__main__":
    main()
