"""When nothing moves, the default pool (``--kv-pool auto``) costs no more than noise.

    python -m benchmarks.default_pool --model smollm2 --repeats 3 \\
        --out benchmarks/results/default_pool_cpu_smollm2.json

Two seer servers of 2 instances run side by side: ``default`` (no ``--kv-pool`` flag: the cost
model decides, and its verdict is recorded) and ``none`` (``--kv-pool none``). Both are warmed
first; idle instances sleep, so the idle server takes no core from the busy one. The same rollout
(new prompts of random lengths each repeat, ``n`` samples each, temperature 0, default chunk size
so no sample moves) runs on each, in random order per repeat. Reported per mode: completion time, tokens
recomputed (what the pool's page granularity costs: each sibling recomputes the partial last page
of its prompt) and the tokens, which must be equal; and the ratios default / none.

All figures are measured on this machine (CPU unless a GPU is present) and labelled so.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import httpx

from benchmarks.harness.result import start as start_run
from benchmarks.kv_pool import mode_bars, rollout, save, stats
from benchmarks.harness.servers import seer_server
from seer_sglang.launch.instances import has_cuda
from seer_sglang.launch.processes import stop_processes
from seer_sglang.models import resolve_model_path

MODES = {"default": [], "none": ["--kv-pool", "none"]}


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 4))
    modes = report["modes"]
    mode_bars(ax1, {m: r["seconds"] for m, r in modes.items()}, "rollout completion (s)")
    mode_bars(ax2, {m: r["recomputed"] for m, r in modes.items()}, "tokens recomputed")
    save(fig, f"Default pool when nothing moves, {report['device']} ({report['model']}), measured", path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--prompt-tokens", default="100,700", help="min,max prompt length")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32")  # exact token equality across batch shapes
    ap.add_argument("--log-dir", default="/tmp/seer-bench-default-pool")
    ap.add_argument("--out", default="benchmarks/results/default_pool_cpu.json")
    args = ap.parse_args()
    run = start_run("default_pool", args.out)
    args.instances, args.chunk_size = 2, 8192
    rng = random.Random(args.seed)
    lo, hi = (int(x) for x in args.prompt_tokens.split(","))

    def fresh_prompts() -> list[list[int]]:
        """New prompts for every repeat (as every training step has): none is cached from the last."""
        return [[rng.randrange(5, 1500) for _ in range(rng.randrange(lo, hi + 1))] for _ in range(args.prompts)]

    model = str(resolve_model_path(args.model))
    engine = ["--dtype", args.dtype, "--scheduler", "context"]
    servers = {m: seer_server(model, args, engine + flags, Path(args.log_dir) / m) for m, flags in MODES.items()}
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    report = {"device": "GPU" if has_cuda() else "CPU", "model": args.model,
              "measured": True, "emulated": False, "args": vars(args), "modes": {}}
    try:
        for mode, (_, url) in servers.items():
            report["modes"][mode] = {"pool": httpx.get(f"{url}/kv_pool", timeout=10).json()}
            rollout(url, fresh_prompts()[:2], 16, n=2)  # warm: first prefill and decode shapes, pool directory
        for _ in range(args.repeats):
            prompts = fresh_prompts()
            order = list(MODES)
            rng.shuffle(order)
            for mode in order:
                runs[mode].append(rollout(servers[mode][1], prompts, args.max_tokens, n=args.n))
    finally:
        stop_processes([p for p, _ in servers.values()])
    for mode, mode_runs in runs.items():
        report["modes"][mode].update({
            "seconds": stats([r["seconds"] for r in mode_runs]),
            "recomputed": stats([r["kv"]["recomputed"] for r in mode_runs]),
            "kv": [r["kv"] for r in mode_runs],
            "identical_tokens": all(r["outputs"] == ref["outputs"] for r, ref in zip(mode_runs, runs["none"]))})
    d, n = report["modes"]["default"], report["modes"]["none"]
    report["ratios"] = {"seconds_default_over_none": d["seconds"]["mean"] / n["seconds"]["mean"],
                        "recomputed_default_over_none": d["recomputed"]["mean"] / max(1, n["recomputed"]["mean"])}
    run.write(report)
    plot(report, run.file("plot.png"))
    print(json.dumps({"ratios": report["ratios"], "default_pool": d["pool"]}, indent=1))


if __name__ == "__main__":
    main()
