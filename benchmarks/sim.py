"""``python -m benchmarks.sim``: the cluster-scale simulator (``python -m seer_sglang.sim``, same flags)
stored as a benchmark run: ``result.json`` with the command, commit and machine, and ``plot.png``.

    python -m benchmarks.sim --workload moonlight --instances 32 --prompts 256 \\
        --out benchmarks/results/sim_h100_moonlight

Simulated, not measured: the real policy objects over a step-time model, no engine.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness.result import start
from seer_sglang.sim.__main__ import parser, run


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [k for k in ("ablation", "chunk_sweep", "instance_sweep", "spread_sweep") if k in report]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    ax = axes[0][0]
    names = list(report["ablation"])
    ax.bar(names, [report["ablation"][n]["ratio_throughput"] for n in names], color="tab:blue")
    ax.set_title(f"throughput vs plain SGLang, {names[0]} (sim)")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.tick_params(axis="x", labelrotation=60)
    for ax, key in zip(axes[0][1:], panels[1:]):
        data = report[key]
        xs = list(data)
        if key == "chunk_sweep":
            ax.plot(xs, [data[x]["ratio_throughput"] for x in xs], marker="o")
            ax.set_title("context: chunk size")
        else:
            ax.plot(xs, [data[x]["context"]["ratio_throughput"] for x in xs], marker="o")
            ax.set_title("context gain vs " + ("instances" if key == "instance_sweep" else "length spread"))
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_ylabel("throughput / plain SGLang")
    fig.suptitle(f"SIMULATED: {report['config']['workload']} - {report['config']['step_model']['name']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> Path:
    args = parser("python -m benchmarks.sim").parse_args(argv)
    folder = start("sim", args.out, argv=argv)
    report = run(args)
    out = folder.write(report)
    plot(report, folder.file("plot.png"))
    print(f"wrote {out} and {folder.file('plot.png')}")
    return out


if __name__ == "__main__":
    main()
