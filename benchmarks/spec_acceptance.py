"""Mean acceptance length of each drafter on grouped math rollouts (G siblings per prompt).

    python -m benchmarks.spec_acceptance --model smollm2 --prompts 4 --group-size 8 --max-tokens 256 \
        --drafters group-suffix,suffix,sam,ngram --out benchmarks/results/spec_acceptance_cpu_smollm2.json

One SGLang instance per drafter (with the seer plugin), one after another, the same sampled workload
each time: all P x G samples sent together, as a rollout does, with the router's request ids so the
SEER drafters know each sample's group. ``ngram`` is SGLang's own NGRAM (one corpus per instance,
blind to groups). A ``none`` reference run (no speculation) gives the temperature-0 check: with
``--temperature 0`` every drafter's tokens must equal it. Acceptance length = tokens emitted per verify
step, over the decode phase, next to what ``benchmarks.draft_replay`` predicts from the reference
run's tokens alone (``replay_acceptance_length``). Drafts are verified whole (``--budget full``), so the figure is the
drafter's own; ``--budget adaptive`` measures what the default budget keeps of it.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import httpx

from benchmarks.harness.result import start as start_run
from benchmarks.draft_replay import replay
from benchmarks.harness.workload import make_prompts
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, has_cuda,
                                            start_instance, stop_instances, visible_gpus, wait_healthy)
from seer_sglang.models import resolve_model_path
from seer_sglang.config import DRAFTERS, PluginConfig
from seer_sglang.launch.drafting import RunningDrafts


def instance_args(drafter: str, cpu: bool, budget: str = "full",
                  cost_path: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The launcher's SEER flags (local drafter, no draft server: one instance); ``ngram`` swaps in
    SGLang's NGRAM with the same tree shape."""
    if drafter == "none":
        return [], {}
    drafts = RunningDrafts("group-suffix" if drafter == "ngram" else drafter, cpu=cpu, budget=budget,
                           cost_path=cost_path)
    args = drafts.instance_args([])
    if drafter == "ngram":
        args[args.index("--speculative-algorithm") + 1] = "NGRAM"
        return args, {}
    return args, PluginConfig(**drafts.plugin_settings()).to_env()


def run(url: str, prompts: list[list[int]], args) -> tuple[list[dict], float]:
    """Every sample, prompt by prompt (``outs[i::G]`` = sibling i of each prompt). ``together``
    sends all at once; ``staggered`` sends sibling 0 of every prompt first, as the length probe of
    context-aware scheduling, and the other siblings once the probes have finished."""
    waves = [list(range(args.group_size))] if args.arrival == "together" else [[0], list(range(1, args.group_size))]
    outs: dict[tuple[int, int], dict] = {}
    t0 = time.perf_counter()
    for wave in waves:
        keys = [(p, i) for p in range(len(prompts)) for i in wave]
        body = {"input_ids": [prompts[p] for p, _ in keys], "rid": [f"g{p}-{i}-c0" for p, i in keys],
                "sampling_params": [{"max_new_tokens": args.max_tokens, "temperature": args.temperature,
                                     "sampling_seed": 1000 * p + i} for p, i in keys]}
        r = httpx.post(f"{url}/generate", json=body, timeout=None)
        r.raise_for_status()
        outs.update(zip(keys, r.json()))
    wall = time.perf_counter() - t0
    return [outs[(p, i)] for p in range(len(prompts)) for i in range(args.group_size)], wall


def save_outputs(prompts: list[list[int]], outputs: list[list[int]], group_size: int, path: Path) -> list[dict]:
    """The samples without speculation, by group: what ``benchmarks.draft_replay`` replays drafters over."""
    groups = [{"prompt": p, "outputs": outputs[k * group_size:(k + 1) * group_size]} for k, p in enumerate(prompts)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"groups": groups}))
    return groups


def acceptance(outs: list[dict]) -> float | None:
    steps = sum(o["meta_info"].get("spec_verify_ct", 0) for o in outs)
    return sum(len(o["output_ids"]) - 1 for o in outs) / steps if steps else None


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.spec_acceptance")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--drafters", default="group-suffix,suffix,sam,ngram")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arrival", default="together", choices=["together", "staggered"],
                    help="staggered: sibling 0 of every prompt first (context scheduling's probe), then the rest")
    ap.add_argument("--budget", default="full", choices=["full", "adaptive", "threshold"],
                    help="draft budget of the SEER drafters (full: the drafter's own acceptance)")
    ap.add_argument("--draft-cost", default=None, help="profile for --budget adaptive (else each instance fits its own)")
    ap.add_argument("--out", default="benchmarks/results/spec_acceptance.json")
    args = ap.parse_args()
    run = start_run("spec_acceptance", args.out)

    from seer_sglang.frontend.tokenizer import PromptTokenizer

    model_path = resolve_model_path(args.model)
    prompts = make_prompts(PromptTokenizer(model_path), args.prompts, args.seed)
    cpu = not has_cuda()
    log_root = Path(f"/tmp/seer-spec-bench-{int(time.time())}")
    log_root.mkdir(parents=True)
    results: dict[str, dict] = {}
    reference = None
    for drafter in ["none", *filter(None, args.drafters.split(","))]:
        extra, env = instance_args(drafter, cpu, args.budget, args.draft_cost)
        spec = InstanceSpec(model_path=model_path, port=free_port(), cpu=cpu, gpus=None if cpu else visible_gpus()[0],
                            sglang_args=["--dtype", args.dtype, *extra], log_path=log_root / f"{drafter}.log",
                            cpu_threads=cpu_threads_per_instance(1) if cpu else None, extra_env=env)
        inst = start_instance(spec)
        try:
            wait_healthy([inst], progress=False)
            outs, wall = run(inst.url, prompts, args)
        finally:
            stop_instances([inst])
        if drafter == "none":
            reference = [o["output_ids"] for o in outs]
            groups = save_outputs(prompts, reference, args.group_size, run.file("outputs.json"))
        by_sibling = [acceptance(outs[i::args.group_size]) for i in range(args.group_size)]
        tokens = sum(len(o["output_ids"]) for o in outs)
        replayed = replay(drafter, groups, RunningDrafts.draft_tokens, RunningDrafts.draft_paths,  # instance defaults
                          args.arrival == "staggered") if drafter in DRAFTERS else None
        results[drafter] = {"mean_acceptance_length": acceptance(outs), "by_sibling_index": by_sibling,
                            "replay_acceptance_length": replayed.acceptance_length if replayed else None,
                            "output_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                            "identical_to_no_speculation": [o["output_ids"] for o in outs] == reference}
        print(f"{drafter:>13}: acceptance {results[drafter]['mean_acceptance_length'] or '-'}  "
              f"{tokens / wall:6.1f} tok/s  identical {results[drafter]['identical_to_no_speculation']}", flush=True)
    if len(results) == 1:
        return
    base = results.get("suffix", {}).get("mean_acceptance_length")
    ratios = {d: r["mean_acceptance_length"] / base for d, r in results.items()
              if base and r["mean_acceptance_length"]}
    speed = {d: r["tokens_per_s"] / results["none"]["tokens_per_s"] for d, r in results.items()}
    report = {"config": {**vars(args), "machine": f"{'GPU' if not cpu else 'CPU'} {platform.machine()}, "
                                                  f"{__import__('os').cpu_count()} cores",
                         "prompt_tokens": statistics.mean(len(p) for p in prompts)},
              "drafters": results, "acceptance_vs_suffix": ratios, "speed_vs_no_speculation": speed}
    out = run.write(report)
    plot(report, run.file("plot.png"))
    print(f"wrote {out}")


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drafters = [d for d, r in report["drafters"].items() if r["mean_acceptance_length"]]
    fig, (ax_bar, ax_sib) = plt.subplots(1, 2, figsize=(11, 3.6))
    ax_bar.bar(drafters, [report["drafters"][d]["mean_acceptance_length"] for d in drafters], color="tab:blue")
    ax_bar.axhline(1.0, color="gray", lw=0.8)
    ax_bar.set_ylabel("tokens per verify step")
    ax_bar.set_title("mean acceptance length")
    for d in drafters:
        ax_sib.plot(range(len(report["drafters"][d]["by_sibling_index"])),
                    [v or 1.0 for v in report["drafters"][d]["by_sibling_index"]], marker="o", label=d)
    ax_sib.set_xlabel("sibling index in its group")
    ax_sib.set_title("acceptance length by sibling")
    ax_sib.legend(fontsize=7)
    cfg = report["config"]
    fig.suptitle(f"{cfg['model']}: {cfg['prompts']} prompts x {cfg['group_size']}, max {cfg['max_tokens']} tokens, "
                 f"temperature {cfg['temperature']} ({cfg['machine']})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
