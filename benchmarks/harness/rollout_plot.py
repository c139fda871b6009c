"""The plot of a ``benchmarks.rollout`` run: KV use and running requests per instance over time for each
mode, throughput against the reference, and when samples finished."""

from __future__ import annotations

from pathlib import Path


def plot(report: dict, runs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(runs)
    fig = plt.figure(figsize=(15, 3.2 * (len(modes) + 1) / 2 + 3))
    grid = fig.add_gridspec(len(modes) + 1, 2)
    for row, mode in enumerate(modes):
        run = runs[mode]
        ax_kv, ax_run = fig.add_subplot(grid[row, 0]), fig.add_subplot(grid[row, 1])
        for inst in sorted({p["instance"] for p in run["timeline"]}):
            pts = [p for p in run["timeline"] if p["instance"] == inst and p["t"] >= run["start"]]
            ts = [p["t"] - run["start"] for p in pts]
            ax_kv.plot(ts, [p["kv_used"] / max(1, p["kv_capacity"]) for p in pts], label=f"instance {inst}")
            ax_run.plot(ts, [p["running"] for p in pts], label=f"instance {inst}")
        ax_kv.set_ylabel(f"{mode}\nKV usage")
        ax_run.set_ylabel("running requests")
        ax_kv.set_ylim(0, 1.05)
        if row == 0:
            ax_kv.set_title("KV usage over time")
            ax_run.set_title("running requests over time")
            ax_kv.legend(fontsize=7)
    ax_bar = fig.add_subplot(grid[len(modes), 0])
    ratios = report["ratios"]
    ax_bar.bar(list(ratios), [ratios[m]["throughput"] for m in ratios], color="tab:blue")
    ax_bar.axhline(1.0, color="gray", lw=0.8)
    ax_bar.set_title(f"throughput vs {report['reference']}")
    ax_cdf = fig.add_subplot(grid[len(modes), 1])
    for mode in modes:
        ends = report["modes"][mode]["finish_s"]
        ax_cdf.plot(ends, [(i + 1) / len(ends) for i in range(len(ends))], label=mode)
    ax_cdf.set_title("samples finished over time")
    ax_cdf.set_xlabel("seconds")
    ax_cdf.legend(fontsize=7)
    cfg = report["config"]
    emulated = f"EMULATED {cfg['emulate']}, " if cfg.get("emulate") else ""
    fig.suptitle(f"{emulated}{cfg['model']} x{cfg['instances']} instances, {cfg['prompts']}x{cfg['group_size']} "
                 f"samples, max {cfg['max_tokens']} tokens ({cfg['machine']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
