"""Soak of a long job: many rollout rounds with chunking, migration, speculation and the file pool on,
and an account at token level of every sample. CPU figures with the tiny model, never GPU measurements.

    python -m benchmarks.soak --rounds 200 --out benchmarks/results/soak_cpu.json

One seer_sglang server (2 instances, ``--chunk-size 32``, ``--kv-pool file``, model-free speculation
``--draft group-suffix``), float32. Every round sends the same rollout: ``--prompts`` prompts x ``--n``
samples, half at temperature 0 and half at temperature 1 with a fixed ``seed``, so every round must
draw exactly the tokens of the first (seeded sampling; chunks of 32 move between the instances). A
``/pause_generation`` + ``/continue_generation`` lands in the middle of every round; its latency is
timed under the load. After each round: the frontend's and each instance's resident memory (the
process and its children), and the samples lost (missing), duplicated (an index twice) or changed
(any token differing from the first round's). The memory's slope per round is a least-squares fit
over the rounds after the first tenth (warm-up: caches filling).

Writes its run (``benchmarks.harness.result``: config, per round, totals, slopes, ``checks``) with a plot.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import threading
import time
from pathlib import Path

import httpx
import psutil

from benchmarks.harness.result import start as start_run
from benchmarks.harness.servers import launch_seer
from seer_sglang.launch.instances import is_instance_command
from seer_sglang.launch.processes import stop_processes
from seer_sglang.models import resolve_model_path


def rss_mb(proc: psutil.Process) -> float:
    """Resident memory of a process and its descendants, in MiB."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def instance_processes(launcher: psutil.Process) -> list[psutil.Process]:
    return [p for p in launcher.children() if is_instance_command(p.cmdline())]


def slope(ys: list[float]) -> float:
    """Least-squares slope of ``ys`` against their index."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))


def rollout_body(args, rng: random.Random) -> dict:
    prompts = [[rng.randrange(5, 900) for _ in range(rng.randint(8, 40))] for _ in range(args.prompts)]
    return {"prompts": [{"input_ids": p, "n": args.n, "group_id": None} for p in prompts],
            "max_tokens": args.max_tokens, "ignore_eos": False, "logprobs": True, "top_logprobs": 2}


def one_round(url: str, bodies: list[dict], pause_after_s: float) -> tuple[list[list[dict]], float]:
    """Both rollouts of a round at once, with a pause and continue in the middle; (samples, pause s)."""
    answers: list = [None] * len(bodies)

    def run(i: int) -> None:
        answers[i] = httpx.post(f"{url}/v1/rollout", json=bodies[i], timeout=1800)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    time.sleep(pause_after_s)
    start = time.perf_counter()
    paused = httpx.post(f"{url}/pause_generation", json={}, timeout=120)
    pause_s = time.perf_counter() - start
    httpx.post(f"{url}/continue_generation", json={}, timeout=120)
    for t in threads:
        t.join()
    assert paused.status_code == 200, paused.text
    for r in answers:
        assert r.status_code == 200, r.text
    return [r.json()["samples"] for r in answers], pause_s


# Two tokens whose float32 logprobs are this close are a near-tie: another batch shape (another
# kernel blocking) may order them the other way without anything being wrong.
TIE = 1e-4


def change(kind: str, ref: dict, got: dict) -> dict:
    """Where a sample first differs from the first round's, and why it may: at temperature 0 the
    first round's two best candidates there and their gap (a near-tie under ``TIE`` is numerical
    noise of batch shapes, not a lost or wrong token); at temperature 1 the largest difference of
    the chosen tokens' logprobs before it (how far the two runs' logits had drifted)."""
    a, b = ref["output_ids"], got["output_ids"]
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    out = {"rollout": kind, "prompt_index": got["prompt_index"], "index": got["index"], "at": at,
           "tokens": [a[at] if at < len(a) else None, b[at] if at < len(b) else None]}
    drift = [abs(x - y) for x, y in zip(ref["logprobs"][:at], got["logprobs"][:at])]
    out["logprob_drift_before"] = max(drift, default=0.0)
    if kind == "greedy" and at < len(ref["top_logprobs"]) and len(ref["top_logprobs"][at]) >= 2:
        (t1, lp1), (t2, lp2) = ref["top_logprobs"][at][:2]
        out["gap"] = lp1 - lp2
        out["near_tie"] = lp1 - lp2 < TIE and {t1, t2} == set(out["tokens"])
    return out


def account(first: list[list[dict]], now: list[list[dict]], expected: list[int], kinds: list[str]) -> dict:
    """Samples missing, duplicated, or with tokens that differ from the first round's (each described
    by ``change``)."""
    lost = duplicated = changed_tokens = 0
    changes = []
    for ref, got, count, kind in zip(first, now, expected, kinds):
        keys = [(s["prompt_index"], s["index"]) for s in got]
        duplicated += len(keys) - len(set(keys))
        lost += count - len(set(keys))
        ref_by = {(s["prompt_index"], s["index"]): s for s in ref}
        for s in got:
            want = ref_by.get((s["prompt_index"], s["index"]))
            if want is not None and s["output_ids"] != want["output_ids"]:
                changes.append(change(kind, want, s))
                changed_tokens += (sum(a != b for a, b in zip(s["output_ids"], want["output_ids"]))
                                   + abs(len(want["output_ids"]) - len(s["output_ids"])))
    return {"lost": lost, "duplicated": duplicated, "changed": len(changes), "changed_tokens": changed_tokens,
            "near_ties": sum(1 for c in changes if c.get("near_tie")), "changes": changes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--chunk-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/soak_cpu.json"))
    args = ap.parse_args()
    run = start_run("soak", args.out)
    rng = random.Random(args.seed)
    greedy = {**rollout_body(args, rng), "temperature": 0.0}
    seeded = {**rollout_body(args, rng), "temperature": 1.0, "seed": 1234}
    bodies = [greedy, seeded]
    expected = [args.prompts * args.n] * 2
    flags = ["--num-instances", "2", "--dtype", "float32", "--chunk-size", str(args.chunk_size), "--kv-pool", "file",
             "--draft", "group-suffix", "--scheduler", "context"]
    log_dir = Path(__file__).resolve().parent.parent / ".logs" / args.out.stem
    proc, url = launch_seer(str(resolve_model_path(args.model)), flags, log_dir)
    launcher = psutil.Process(proc.pid)
    rounds, first = [], None
    try:
        one_round(url, bodies, 0.5)  # warm-up: compiles, caches, the drafter's first groups
        for k in range(args.rounds):
            t0 = time.perf_counter()
            samples, pause_s = one_round(url, bodies, 0.3 + 0.4 * rng.random())
            first = first or samples
            frontend_mb = launcher.memory_info().rss / 2**20
            instances_mb = [rss_mb(p) for p in instance_processes(launcher)]
            kv = [c["kv"] for batch in samples for s in batch for c in s["chunks"] if c.get("kv")]
            rounds.append({"round": k, "elapsed_s": time.perf_counter() - t0, "pause_s": pause_s,
                           "frontend_rss_mb": frontend_mb, "instance_rss_mb": instances_mb,
                           "chunks": sum(len(s["chunks"]) for batch in samples for s in batch),
                           "moved_chunks": sum(1 for batch in samples for s in batch
                                               for a, b in zip(s["chunks"], s["chunks"][1:])
                                               if a["instance"] != b["instance"]),
                           "pool_tokens": sum(c.get("pool", 0) for c in kv),
                           **account(first, samples, expected, ["greedy", "seeded"])})
            r = rounds[-1]
            print(f"round {k}: {r['elapsed_s']:.1f} s, pause {1e3 * pause_s:.0f} ms, frontend {frontend_mb:.0f} MiB, "
                  f"instances {[round(m) for m in instances_mb]} MiB, moved {r['moved_chunks']}, "
                  f"lost {r['lost']} dup {r['duplicated']} changed {r['changed']} (near-ties {r['near_ties']})", flush=True)
            for c in r["changes"]:
                print("   ", json.dumps(c), flush=True)
    finally:
        stop_processes([proc])
    settled = rounds[len(rounds) // 10:]
    pauses = sorted(r["pause_s"] for r in rounds)
    totals = {key: sum(r[key] for r in rounds) for key in ("lost", "duplicated", "changed", "changed_tokens",
                                                            "near_ties", "chunks", "moved_chunks", "pool_tokens")}
    slopes = {"frontend_mb_per_round": slope([r["frontend_rss_mb"] for r in settled]),
              "instances_mb_per_round": [slope([r["instance_rss_mb"][i] for r in settled])
                                         for i in range(len(settled[0]["instance_rss_mb"]))]}
    result = {"kind": "CPU measurement (tiny model, 2 CPU instances); not a GPU figure",
              "machine": platform.platform(), "config": {**vars(args), "out": str(args.out), "flags": flags},
              "samples_per_round": sum(expected), "rounds": rounds, "totals": totals, "rss_slope": slopes,
              "pause_ms": {"p50": 1e3 * pauses[len(pauses) // 2], "p99": 1e3 * pauses[int(0.99 * (len(pauses) - 1))],
                           "max": 1e3 * pauses[-1]},
              "checks": {"nothing_lost": totals["lost"] == 0, "nothing_duplicated": totals["duplicated"] == 0,
                         "no_token_changed": totals["changed_tokens"] == 0,
                         "every_change_a_greedy_near_tie": totals["changed"] == totals["near_ties"],
                         "samples_moved": totals["moved_chunks"] > 0,
                         # under 0.5 MiB a round: 200 rounds would not add 100 MiB to the frontend
                         "frontend_memory_flat": slopes["frontend_mb_per_round"] < 0.5}}
    run.write(result)
    plot(result, run.file("plot.png"))
    print(json.dumps({k: result[k] for k in ("totals", "rss_slope", "pause_ms", "checks")}, indent=1))


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = result["rounds"]
    xs = [r["round"] for r in rounds]
    fig, (mem, pause) = plt.subplots(1, 2, figsize=(11, 4))
    mem.plot(xs, [r["frontend_rss_mb"] for r in rounds], label="frontend")
    for i in range(len(rounds[0]["instance_rss_mb"])):
        mem.plot(xs, [r["instance_rss_mb"][i] for r in rounds], label=f"instance {i}")
    mem.set_xlabel("round")
    mem.set_ylabel("RSS (MiB)")
    mem.set_yscale("log")
    mem.legend()
    mem.set_title("resident memory after each round")
    pause.plot(xs, [1e3 * r["pause_s"] for r in rounds], ".")
    pause.set_xlabel("round")
    pause.set_ylabel("/pause_generation (ms)")
    pause.set_title("pause latency under load")
    fig.suptitle(f"soak, {len(rounds)} rounds x {result['samples_per_round']} samples (CPU, tiny model; "
                 f"lost {result['totals']['lost']}, duplicated {result['totals']['duplicated']}, "
                 f"changed tokens {result['totals']['changed_tokens']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
