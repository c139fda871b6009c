"""Drafter and draft-server speed on CPU.

    python -m benchmarks.drafters --out benchmarks/results/drafters_cpu.json [--quick]

- lookup: one draft per request-step while the 8 siblings of a group decode side by side (each step
  appends one token to every sibling and drafts for it), measured once the group holds more than
  half of its final 8 x 4096 tokens; draft of at most 8 tokens, match cap 64.
- append: tokens/s through ``Drafter.update``: whole sequences at once, and in chunks of 1/8/64.
- server: updates/s and fetched tokens/s at the server with several instance processes syncing one
  set of groups through ``DraftClient``; raw update capacity with pipelined batches; sync lag.

The token data is text-like: siblings are noisy copies of one document (local stdlib sources through
the local SmolLM2 tokenizer when it is prepared, else a Zipf stream), diverging every ~30 tokens.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from benchmarks.harness.result import start as start_run
from seer_sglang.launch.instances import free_port
from seer_sglang.speculative.drafters import make_drafter
from seer_sglang.speculative import native as native_mod
from seer_sglang.draft_server.client import DraftClient, call, wait_ready
from seer_sglang.draft_server.codec import pack_tokens


# ---- data ----
def corpus_tokens(limit: int = 400_000, seed: int = 0) -> tuple[list[int], str]:
    from seer_sglang.models import is_ready, model_dir

    src = Path(sysconfig.get_paths()["stdlib"])
    if is_ready("smollm2") and src.is_dir():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(model_dir("smollm2") / "tokenizer.json"))
        out: list[int] = []
        for f in sorted(src.glob("*.py")):
            out.extend(tok.encode(f.read_text(errors="ignore")).ids)
            if len(out) >= limit:
                break
        return out, "stdlib sources, SmolLM2 tokenizer"
    rng = random.Random(seed)
    weights = [1 / (r + 1) for r in range(49152)]
    return rng.choices(range(49152), weights, k=limit), "Zipf(1) stream over 49152 ids"


def siblings(corpus: list[int], group: int, length: int, rng: random.Random) -> tuple[list[int], list[list[int]]]:
    """A prompt and `group` outputs that follow one base text and diverge every ~30 tokens."""
    start = rng.randrange(len(corpus) - 2 * length - 512)
    prompt, base = corpus[start:start + 256], corpus[start + 256:start + 256 + 2 * length]
    out = []
    for _ in range(group):
        s, i = [], 0
        while len(s) < length:
            if rng.random() < 1 / 30:
                j = rng.randrange(len(corpus) - 40)
                s.extend(corpus[j:j + rng.randint(1, 30)])
                i += rng.randint(0, 20)
            else:
                s.append(base[i % len(base)])
                i += 1
        out.append(s[:length])
    return prompt, out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# ---- drafters ----
def bench_lookup(kind, name: str, prompt, sibs, max_paths: int, stride: int) -> dict:
    d = make_drafter(name, native=kind)
    d.register_group("g", prompt)
    n = len(sibs[0])
    upd, lat, lens = [], [], []
    clock = time.perf_counter
    for pos in range(n):
        for r, s in enumerate(sibs):
            rid = f"r{r}"
            t0 = clock()
            d.update("g", rid, pos, s[pos:pos + 1])
            t1 = clock()
            if pos >= n // 2 and pos % stride == 0:
                draft = d.draft("g", rid, 8, max_paths=max_paths)
                lat.append(clock() - t1)
                upd.append(t1 - t0)
                lens.append(len(draft))
    return {"draft_us_p50": pct(lat, 0.5) * 1e6, "draft_us_p99": pct(lat, 0.99) * 1e6,
            "update1_us_p50": pct(upd, 0.5) * 1e6, "mean_draft_len": statistics.fmean(lens),
            "samples": len(lat), "group_tokens": len(sibs) * n + len(prompt)}


def bench_append(kind, prompt, sibs) -> dict:
    out = {}
    for chunk in (0, 64, 8, 1):
        d = make_drafter("group-suffix", native=kind)
        d.register_group("g", prompt)
        n = len(sibs[0]) if chunk == 0 or kind is not False else len(sibs[0]) // 4
        total, t0 = 0, time.perf_counter()
        if chunk == 0:
            for r, s in enumerate(sibs):
                total += len(s[:n])
                d.update("g", f"r{r}", 0, s[:n])
        else:
            for pos in range(0, n, chunk):
                for r, s in enumerate(sibs):
                    piece = s[pos:pos + chunk]
                    total += len(piece)
                    d.update("g", f"r{r}", pos, piece)
        dt = time.perf_counter() - t0
        key = "bulk" if chunk == 0 else f"chunk{chunk}"
        out[f"{key}_tok_per_s"] = total / dt
        if chunk == 0:
            out["bytes_per_token"] = d.memory_bytes() / total if kind is not False else None
    return out


# ---- server ----
def _instance(address: str, idx: int, instances: int, groups: int, per_group: int, seconds: float,
              seed: int, go, out: mp.Queue) -> None:
    """One instance: serves requests idx, idx+instances, ... of every group; appends 2 tokens per request
    per 2 ms step and drafts for each, as a decode loop would."""
    rng = random.Random(seed + idx)
    client = DraftClient(address)
    mine = [(f"g{g}", f"r{r}") for g in range(groups) for r in range(idx, per_group, instances)]
    counts = dict.fromkeys(mine, 0)
    out.put("ready")
    go.wait()
    deadline = time.monotonic() + seconds
    steps = drafted = 0
    while time.monotonic() < deadline:
        for key in mine:
            toks = [rng.randrange(50) for _ in range(2)]
            counts[key] = client.update(*key, counts[key], toks)
            drafted += len(client.draft(*key, 4))
        steps += 1
        time.sleep(0.002)
    client.flush(5)
    out.put({"steps": steps, "drafted": drafted, **client.counters})
    client.close()


def bench_server(seconds: float, instances: int, groups: int, per_group: int) -> dict:
    address = f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([sys.executable, "-m", "seer_sglang.draft_server", "--bind", address,
                             "--drafter", "group-suffix"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(address, 60)
        res = {"instances": instances, "groups": groups, "requests_per_group": per_group, "seconds": seconds}
        ctx = mp.get_context("spawn")
        q, go = ctx.Queue(), ctx.Event()
        procs = [ctx.Process(target=_instance, args=(address, i, instances, groups, per_group, seconds, 0, go, q))
                 for i in range(instances)]
        for p in procs:
            p.start()
        for _ in procs:  # start-up (imports) is not part of the measurement
            assert q.get(timeout=120) == "ready"
        go.set()
        time.sleep(1.0)
        s0, t0 = call(address, "stats"), time.monotonic()
        time.sleep(seconds - 2.0)
        s1, t1 = call(address, "stats"), time.monotonic()
        client_stats = [q.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        dt = t1 - t0
        for k in ("updates", "update_calls", "tokens_in", "fetches", "fetched_tokens"):
            res[f"{k}_per_s"] = (s1[k] - s0[k]) / dt
        res["instance_steps_per_s"] = sum(c["steps"] for c in client_stats) / seconds
        res["drafted_tokens"] = sum(c["drafted"] for c in client_stats)
        res["client_timeouts"] = sum(c["timeouts"] for c in client_stats)
        res["capacity"] = bench_capacity(address, seconds=3.0)
        res["sync_lag_ms"] = bench_lag(address)
        return res
    finally:
        os.kill(proc.pid, 15)
        proc.wait(timeout=10)


def _pump(address: str, idx: int, seconds: float, batch: int, go, out: mp.Queue) -> None:
    """Closed-loop update_many batches of `batch` request updates (4 tokens each) on a raw socket."""
    import zmq

    from seer_sglang.draft_server.codec import decode as _decode, encode as _encode

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(address)
    counts: dict[tuple[str, str], int] = {}
    sent, cid = 0, 0
    data = pack_tokens([1, 2, 3, 4])
    out.put("ready")
    go.wait()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ups = []
        for i in range(batch):
            key = (f"cap{idx}_{i % 32}", f"r{i % 8}")
            ups.append([key[0], key[1], counts.get(key, 0), data])
            counts[key] = counts.get(key, 0) + 4
        cid += 1
        sock.send(_encode([cid, "update_many", [ups]]))
        _decode(sock.recv())
        sent += batch
    out.put(sent)
    sock.close(0)
    ctx.term()


def bench_capacity(address: str, seconds: float, pumps: int = 2, batch: int = 64) -> dict:
    ctx = mp.get_context("spawn")
    q, go = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_pump, args=(address, i, seconds, batch, go, q)) for i in range(pumps)]
    for p in procs:
        p.start()
    for _ in procs:
        assert q.get(timeout=120) == "ready"
    go.set()
    total = sum(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    return {"pumps": pumps, "batch": batch, "tokens_per_update": 4,
            "updates_per_s": total / seconds, "tokens_per_s": 4 * total / seconds}


def bench_lag(address: str, samples: int = 100) -> dict:
    """Time from one instance's update() until another instance's replica holds the token."""
    lags = []
    with DraftClient(address) as a, DraftClient(address) as b:
        b.register_group("lag")
        for i in range(samples):
            t0 = time.perf_counter()
            a.update("lag", "r", i, [i])
            while b.drafter.count("lag", "r") <= i:
                b.draft("lag", "r", 1)  # keeps the group in use, as a decode loop would
                time.sleep(0.0002)
            lags.append((time.perf_counter() - t0) * 1e3)
    return {"p50": pct(lags, 0.5), "p99": pct(lags, 0.99), "samples": samples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results/drafters_cpu.json")
    ap.add_argument("--quick", action="store_true", help="shorter runs (smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parts", default="drafters,server", help="comma-separated: drafters, server")
    args = ap.parse_args()
    run = start_run("drafters", args.out)
    parts = set(args.parts.split(","))
    rng = random.Random(args.seed)
    length = 1024 if args.quick else 4096
    corpus, source = corpus_tokens()
    prompt, sibs = siblings(corpus, 8, length, rng)
    kinds: list = [*native_mod.classes(), False] if "drafters" in parts else []
    result = {"machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                          "cores": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
              "data": {"source": source, "group": 8, "tokens_per_sibling": length, "prompt_tokens": len(prompt)},
              "lookup": {}, "append": {}}
    for kind in kinds:
        label = kind or "python"
        stride = 1 if kind else 4
        for name, paths in (("group-suffix", 1), ("group-suffix", 4), ("suffix", 1), ("sam", 1)):
            key = f"{label}/{name}/paths{paths}"
            result["lookup"][key] = r = bench_lookup(kind, name, prompt, sibs, paths, stride)
            print(f"lookup {key}: p50 {r['draft_us_p50']:.1f} us p99 {r['draft_us_p99']:.1f} us "
                  f"update {r['update1_us_p50']:.1f} us, mean draft {r['mean_draft_len']:.2f}", flush=True)
        result["append"][label] = a = bench_append(kind, prompt, sibs)
        print(f"append {label}: " + ", ".join(f"{k} {v:,.0f}" for k, v in a.items() if v is not None), flush=True)
    if "server" in parts:
        result["server"] = bench_server(seconds=4.0 if args.quick else 8.0, instances=4, groups=16, per_group=8)
        print("server:", json.dumps(result["server"], indent=1), flush=True)
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    print("wrote", run.write(result))


if __name__ == "__main__":
    main()
