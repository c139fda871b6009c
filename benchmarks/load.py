"""Load and soak benchmark of the frontend: many concurrent clients, faults from the client side, and an
account of every request at the end. CPU figures with the tiny model, never GPU measurements.

    python -m benchmarks.load --model tiny --clients 2000 --soak-s 60 --seed 0 \
        --out benchmarks/results/load_cpu.json

One seer_sglang server (one instance, ``--draft none``) and one plain SGLang instance started with the
same SGLang flags. Two phases:

1. **Added latency.** The same closed-loop load (``--latency-clients`` clients, each sending one chat
   completion after the other) goes to plain SGLang, straight to seer's instance (past the frontend)
   and through the frontend; the targets run in a random order per repeat, each warmed first. The
   frontend's added latency is its p50 / p99 minus the direct ones.
2. **Soak.** ``--clients`` clients run for ``--soak-s`` seconds against the frontend, each sending one
   request after the other from a random mix: chat completions (plain and streamed), rollouts (plain
   and streamed), native ``/generate``; streams are dropped mid-way at random, some requests are aborted
   by rid or by group, and the server is paused and continued every ``--pause-every-s``. The frontend's
   memory is sampled throughout. Afterwards: every request is accounted for (complete, reported aborted,
   dropped by its own client, or refused with 429), no sample is duplicated or missing, no chunk is
   left on the instance, and the frontend holds no more processes or file descriptors than before.

Writes its run (``benchmarks.harness.result``: config, both phases, the accounting, and ``checks``) with a plot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from benchmarks.harness.result import start as start_run
from benchmarks.harness.servers import launch_seer
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, has_cuda,
                                            start_instance, stop_instances, wait_healthy)
from seer_sglang.frontend.instance_client import KEEPALIVE_EXPIRY_S
from seer_sglang.launch.processes import stop_processes
from seer_sglang.models import resolve_model_path

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("river stone apple cloud seven garden lamp orange winter market quiet bridge paper engine "
         "silver forest yellow window number little ocean").split()

# The soak's mix: (kind, weight). Long requests are the ones aborted.
MIX = [("chat", 25), ("chat_stream", 15), ("rollout", 15), ("rollout_stream", 10), ("generate", 20),
       ("abort_rid", 8), ("abort_group", 7)]


def prompt(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24)))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- phase 1: added latency --------------------------------------------------------------------

def chat_body(rng: random.Random, max_tokens: int, **extra) -> dict:
    return {"model": "default", "messages": [{"role": "user", "content": prompt(rng)}],
            "max_tokens": max_tokens, "temperature": 0, **extra}


async def closed_loop(url: str, clients: int, duration_s: float, max_tokens: int, seed: int) -> dict:
    """``clients`` clients, each sending one chat completion after the other for ``duration_s``."""
    latencies: list[float] = []
    failures = 0
    deadline = time.perf_counter() + duration_s
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients, keepalive_expiry=KEEPALIVE_EXPIRY_S)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as http:
        async def client(k: int) -> None:
            nonlocal failures
            rng = random.Random(seed * 100003 + k)
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                r = await http.post("/v1/chat/completions", json=chat_body(rng, max_tokens, ignore_eos=True))
                if r.status_code == 200:
                    latencies.append(time.perf_counter() - t0)
                else:
                    failures += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(client(k) for k in range(clients)))
        wall = time.perf_counter() - t0
    return {"requests": len(latencies), "failures": failures, "wall_s": wall,
            "requests_per_s": len(latencies) / wall, "p50_ms": 1e3 * percentile(latencies, 0.5),
            "p99_ms": 1e3 * percentile(latencies, 0.99), "mean_ms": 1e3 * statistics.fmean(latencies)}


def latency_phase(targets: dict[str, str], args, rng: random.Random) -> dict:
    runs: dict[str, list[dict]] = {name: [] for name in targets}
    for name, url in targets.items():
        print(f"[latency] warming {name} ...", flush=True)
        asyncio.run(closed_loop(url, args.latency_clients, 3.0, args.latency_tokens, seed=999))
    for repeat in range(args.repeats):
        for name in rng.sample(list(targets), len(targets)):
            run = asyncio.run(closed_loop(targets[name], args.latency_clients, args.latency_s,
                                          args.latency_tokens, seed=args.seed + repeat))
            print(f"[latency] repeat {repeat + 1}/{args.repeats} {name}: {run['requests_per_s']:.1f} req/s, "
                  f"p50 {run['p50_ms']:.0f} ms, p99 {run['p99_ms']:.0f} ms", flush=True)
            runs[name].append(run)
    out: dict = {"targets": {}}
    for name, rs in runs.items():
        out["targets"][name] = {"runs": rs, **{k: statistics.fmean(r[k] for r in rs)
                                               for k in ("requests_per_s", "p50_ms", "p99_ms", "mean_ms")}}
    t = out["targets"]
    for base in ("plain", "instance"):
        out[f"added_vs_{base}"] = {q: t["frontend"][q] - t[base][q] for q in ("p50_ms", "p99_ms", "mean_ms")}
    return out


# ---- phase 2: soak -----------------------------------------------------------------------------

@dataclass
class Ledger:
    """Every request of the soak and what became of it; samples by (request, index)."""

    outcomes: Counter = field(default_factory=Counter)  # per request: complete / aborted / dropped / refused / lost
    by_kind: dict[str, Counter] = field(default_factory=dict)
    samples: Counter = field(default_factory=Counter)  # complete / aborted samples
    duplicated: int = 0
    missing: int = 0
    wrong_length: int = 0
    server_errors: int = 0
    problems: list[str] = field(default_factory=list)
    rids: set[str] = field(default_factory=set)

    def record(self, kind: str, outcome: str, note: str | None = None) -> None:
        self.outcomes[outcome] += 1
        self.by_kind.setdefault(kind, Counter())[outcome] += 1
        if note and len(self.problems) < 20:
            self.problems.append(f"{kind}: {note}")

    def note_rid(self, rid: str) -> None:
        """A sample's rid: one seen before is a duplicate."""
        self.duplicated += rid in self.rids
        self.rids.add(rid)

    def check_samples(self, kind: str, samples: list[dict], n: int, max_tokens: int) -> str:
        """A rollout's answer: indices 0..n-1 once each; a finished sample has all its tokens."""
        indices = Counter(s["index"] for s in samples)
        self.duplicated += sum(c - 1 for c in indices.values() if c > 1)
        self.missing += len(set(range(n)) - set(indices))
        for s in samples:
            self.note_rid(s["rid"])
            if s["finish_reason"] == "abort":
                self.samples["aborted"] += 1
            else:
                self.samples["complete"] += 1
                if s["finish_reason"] == "length" and len(s["output_ids"]) != max_tokens:
                    self.wrong_length += 1
        return "aborted" if any(s["finish_reason"] == "abort" for s in samples) else "complete"


class Soak:
    def __init__(self, url: str, args, ledger: Ledger):
        self.url, self.args, self.ledger = url, args, ledger
        self.http: httpx.AsyncClient | None = None
        self.paused_s = 0.0
        self.pauses = 0
        self.pause_calls: list[dict] = []  # how long each /pause_generation and /continue_generation took

    async def run(self) -> float:
        # A fresh connection per request: a reused idle one can be closed by the server's keep-alive
        # timer while a load generator this busy is still about to write on it, and the request would
        # be lost before the server ever saw it. So every lost request here is the server's doing.
        limits = httpx.Limits(max_connections=self.args.clients * 2, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=self.url, timeout=600, limits=limits) as self.http:
            deadline = time.perf_counter() + self.args.soak_s
            t0 = time.perf_counter()
            pauser = asyncio.create_task(self.pause_loop(deadline))
            await asyncio.gather(*(self.client(k, deadline) for k in range(self.args.clients)))
            pauser.cancel()
            return time.perf_counter() - t0

    async def pause_loop(self, deadline: float) -> None:
        while time.perf_counter() + self.args.pause_every_s < deadline:
            await asyncio.sleep(self.args.pause_every_s)
            t0 = time.perf_counter()
            await self.http.post("/pause_generation", json={})
            t1 = time.perf_counter()
            await asyncio.sleep(self.args.pause_s)
            t2 = time.perf_counter()
            await self.http.post("/continue_generation", json={})
            t3 = time.perf_counter()
            self.pause_calls.append({"pause_s": t1 - t0, "continue_s": t3 - t2})
            self.paused_s += t3 - t0
            self.pauses += 1

    async def client(self, k: int, deadline: float) -> None:
        rng = random.Random(self.args.seed * 7919 + k)
        await asyncio.sleep(rng.random() * 2.0)  # the clients arrive over two seconds
        kinds, weights = zip(*MIX)
        while time.perf_counter() < deadline:
            kind = rng.choices(kinds, weights)[0]
            try:
                await getattr(self, kind)(rng, kind)
            except httpx.HTTPError as e:
                self.ledger.record(kind, "lost", f"{type(e).__name__}: {e}")

    def _status(self, kind: str, r: httpx.Response) -> bool:
        """True for a 200; anything else is recorded (429 = refused, 5xx = a server error)."""
        if r.status_code == 200:
            return True
        if r.status_code == 429:
            self.ledger.record(kind, "refused")
        else:
            self.ledger.server_errors += r.status_code >= 500
            self.ledger.record(kind, "lost", f"HTTP {r.status_code}: {r.text[:200]}")
        return False

    async def chat(self, rng: random.Random, kind: str) -> None:
        max_tokens = self.args.max_tokens
        r = await self.http.post("/v1/chat/completions", json=chat_body(rng, max_tokens, ignore_eos=True))
        if not self._status(kind, r):
            return
        choice = r.json()["choices"][0]
        ok = choice["finish_reason"] == "length" and r.json()["usage"]["completion_tokens"] == max_tokens
        self.ledger.wrong_length += not ok
        self.ledger.samples["complete"] += 1
        self.ledger.record(kind, "complete")

    async def chat_stream(self, rng: random.Random, kind: str) -> None:
        drop = rng.random() < self.args.drop_share
        body = chat_body(rng, self.args.max_tokens, ignore_eos=True, stream=True)
        async with self.http.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                await r.aread()
                self._status(kind, r)
                return
            finish = None
            async for line in r.aiter_lines():
                if not line.startswith("data:") or line.endswith("[DONE]"):
                    continue
                if drop:  # the client goes away after its first event
                    self.ledger.record(kind, "dropped")
                    return
                event = json.loads(line[5:])
                if "error" in event:
                    self.ledger.record(kind, "lost", str(event["error"]))
                    return
                finish = event["choices"][0].get("finish_reason") or finish if event.get("choices") else finish
        self.ledger.samples["complete"] += finish is not None
        self.ledger.record(kind, "complete" if finish == "length" else "lost", None if finish else "no finish")

    def _rollout_body(self, rng: random.Random, max_tokens: int, group_id: str | None = None, **extra) -> dict:
        text = prompt(rng)
        return {"prompts": [{"text": text, "group_id": group_id} if group_id else text], "n": self.args.group_size,
                "max_tokens": max_tokens, "temperature": 1.0, "ignore_eos": True, **extra}

    async def rollout(self, rng: random.Random, kind: str) -> None:
        r = await self.http.post("/v1/rollout", json=self._rollout_body(rng, self.args.max_tokens))
        if self._status(kind, r):
            self.ledger.record(kind, self.ledger.check_samples(kind, r.json()["samples"], self.args.group_size,
                                                               self.args.max_tokens))

    async def rollout_stream(self, rng: random.Random, kind: str) -> None:
        drop = rng.random() < self.args.drop_share
        body = self._rollout_body(rng, self.args.max_tokens, stream=True)
        samples = []
        async with self.http.stream("POST", "/v1/rollout", json=body) as r:
            if r.status_code != 200:
                await r.aread()
                self._status(kind, r)
                return
            async for line in r.aiter_lines():
                if not line.strip():
                    continue
                if drop:  # away after the first finished sample: the rest are cancelled
                    self.ledger.record(kind, "dropped")
                    return
                event = json.loads(line)
                if event.get("type") == "sample":
                    samples.append(event)
        self.ledger.record(kind, self.ledger.check_samples(kind, samples, self.args.group_size,
                                                           self.args.max_tokens))

    async def generate(self, rng: random.Random, kind: str, rid: str | None = None,
                       max_tokens: int | None = None) -> None:
        max_tokens = max_tokens or self.args.max_tokens
        body = {"rid": rid or uuid.uuid4().hex, "text": prompt(rng),
                "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 1.0}}
        r = await self.http.post("/generate", json=body)
        if not self._status(kind, r):
            return
        answer = r.json()
        meta = answer["meta_info"]
        self.ledger.note_rid(meta["id"])
        if meta["finish_reason"]["type"] == "abort":
            self.ledger.samples["aborted"] += 1
            self.ledger.record(kind, "aborted")
        else:
            self.ledger.samples["complete"] += 1
            self.ledger.wrong_length += len(answer["output_ids"]) != max_tokens
            self.ledger.record(kind, "complete")

    async def abort_rid(self, rng: random.Random, kind: str) -> None:
        rid = f"load-{uuid.uuid4().hex}"
        task = asyncio.create_task(self.generate(rng, kind, rid=rid, max_tokens=self.args.long_tokens))
        try:
            await asyncio.sleep(rng.uniform(0.05, 1.0))
            await self.http.post("/abort_request", json={"rid": rid})
        finally:
            await task

    async def abort_group(self, rng: random.Random, kind: str) -> None:
        gid = f"load-{uuid.uuid4().hex}"
        body = self._rollout_body(rng, self.args.long_tokens, group_id=gid)
        task = asyncio.create_task(self.http.post("/v1/rollout", json=body))
        try:
            await asyncio.sleep(rng.uniform(0.05, 1.0))
            await self.http.post("/abort_request", json={"rid": gid})
        finally:
            r = await task
        if self._status(kind, r):
            self.ledger.record(kind, self.ledger.check_samples(kind, r.json()["samples"], self.args.group_size,
                                                               self.args.long_tokens))


async def sample_memory(proc: psutil.Process, every_s: float, out: list[tuple[float, float]], t0: float) -> None:
    while True:
        out.append((time.perf_counter() - t0, proc.memory_info().rss / 2 ** 20))
        await asyncio.sleep(every_s)


async def drain(url: str, timeout_s: float) -> tuple[float | None, dict]:
    """Seconds until the frontend holds no sample, has no chunk in flight and its instance runs and
    queues nothing (None: not within ``timeout_s``)."""
    t0 = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        while True:
            worker = (await http.get("/workers")).json()["workers"][0]
            inst = {"live_samples": worker["load"], "instances": worker["instances"]}
            if worker["load"] == 0 and all(i["running"] == 0 and i["inflight_chunks"] == 0 and i["waiting"] == 0
                                           for i in worker["instances"]):
                return time.perf_counter() - t0, inst
            if time.perf_counter() - t0 > timeout_s:
                return None, inst
            await asyncio.sleep(0.5)


def footprint(proc: psutil.Process) -> dict:
    return {"processes": len(proc.children(recursive=True)), "fds": proc.num_fds(),
            "threads": proc.num_threads(), "rss_mb": proc.memory_info().rss / 2 ** 20}


async def soak_phase(url: str, proc: psutil.Process, args) -> dict:
    """``--soak-rounds`` rounds of the soak, each drained; the footprint after each round shows whether
    memory, processes or file descriptors grow with the work done (a leak) or settle (bounded)."""
    ledger = Ledger()
    before = footprint(proc)
    memory: list[tuple[float, float]] = []
    t0 = time.perf_counter()
    sampler = asyncio.create_task(sample_memory(proc, 0.5, memory, t0))
    soak = Soak(url, args, ledger)
    rounds = []
    for k in range(args.soak_rounds):
        wall = await soak.run()
        drained_s, instances = await drain(url, timeout_s=120)
        await asyncio.sleep(5.0)  # idle keep-alive connections to the instance expire
        rounds.append({"wall_s": wall, "ended_at_s": time.perf_counter() - t0, "drained_s": drained_s,
                       "instances_after": instances,
                       "requests": sum(ledger.outcomes.values()), "footprint": footprint(proc)})
        print(f"[soak] round {k + 1}/{args.soak_rounds}: {rounds[-1]}", flush=True)
    sampler.cancel()
    wall = sum(r["wall_s"] for r in rounds)
    answered = sum(v for k, v in ledger.outcomes.items() if k != "lost")
    return {
        "wall_s": wall, "requests": sum(ledger.outcomes.values()), "outcomes": dict(ledger.outcomes),
        "by_kind": {k: dict(v) for k, v in ledger.by_kind.items()},
        "samples": dict(ledger.samples), "requests_per_s": answered / wall,
        "samples_per_s": sum(ledger.samples.values()) / wall,
        "lost": ledger.outcomes["lost"], "duplicated": ledger.duplicated, "missing": ledger.missing,
        "wrong_length": ledger.wrong_length, "server_errors": ledger.server_errors, "problems": ledger.problems,
        "pauses": soak.pauses, "paused_s": soak.paused_s, "pause_calls": soak.pause_calls, "rounds": rounds,
        "drained_s": None if any(r["drained_s"] is None for r in rounds) else max(r["drained_s"] for r in rounds),
        "before": before, "after_first": rounds[0]["footprint"], "after": rounds[-1]["footprint"],
        "memory_mb": {"start": memory[0][1], "peak": max(m for _, m in memory), "end": memory[-1][1],
                      "after_each_round": [r["footprint"]["rss_mb"] for r in rounds],
                      "series": [[round(t, 2), round(m, 1)] for t, m in memory]},
    }


# ---- main --------------------------------------------------------------------------------------

def checks(latency: dict, soak: dict) -> dict:
    return {
        "no_request_lost": soak["lost"] == 0,
        "no_sample_duplicated_or_missing": soak["duplicated"] == 0 and soak["missing"] == 0,
        "every_finished_sample_whole": soak["wrong_length"] == 0,
        "no_server_error": soak["server_errors"] == 0,
        "no_chunk_left_running": soak["drained_s"] is not None,
        "no_process_leaked": soak["after"]["processes"] == soak["before"]["processes"],
        # after the first round (which opens what a server opens once, lazily), no round adds any
        "no_file_leaked": soak["after"]["fds"] <= soak["after_first"]["fds"],
        # memory settles: the last round ends within 10% of where the first ended
        "memory_bounded": soak["after"]["rss_mb"] <= 1.1 * soak["after_first"]["rss_mb"],
        "latency_phase_without_failures": all(r["failures"] == 0 for t in latency["targets"].values()
                                              for r in t["runs"]),
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    targets = result["latency"]["targets"]
    names = list(targets)
    x = range(len(names))
    a.bar([i - 0.2 for i in x], [targets[n]["p50_ms"] for n in names], width=0.4, label="p50")
    a.bar([i + 0.2 for i in x], [targets[n]["p99_ms"] for n in names], width=0.4, label="p99")
    a.set_xticks(list(x), names)
    a.set_ylabel("chat completion latency (ms)")
    a.set_title(f"{result['config']['latency_clients']} closed-loop clients (CPU, tiny model)")
    a.legend()
    series = result["soak"]["memory_mb"]["series"]
    b.plot([t for t, _ in series], [m for _, m in series])
    for k, r in enumerate(result["soak"]["rounds"]):
        b.axvline(r["ended_at_s"], color="grey", linestyle="--", label="round drained" if k == 0 else None)
    b.set_xlabel("seconds")
    b.set_ylabel("frontend RSS (MiB)")
    b.set_title(f"soak: {result['config']['clients']} clients, {result['soak']['requests']} requests")
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny")
    p.add_argument("--clients", type=int, default=2000, help="concurrent clients in the soak")
    p.add_argument("--soak-s", type=float, default=45.0, help="seconds clients start requests, per round")
    p.add_argument("--soak-rounds", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=16, help="tokens per sample in the soak")
    p.add_argument("--long-tokens", type=int, default=400, help="tokens of the requests that get aborted")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--drop-share", type=float, default=0.3, help="share of streams the client drops mid-way")
    p.add_argument("--pause-every-s", type=float, default=15.0)
    p.add_argument("--pause-s", type=float, default=1.0)
    p.add_argument("--latency-clients", type=int, default=32)
    p.add_argument("--latency-s", type=float, default=15.0)
    p.add_argument("--latency-tokens", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-dir", default="/tmp/seer_load_logs")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "load_cpu.json"))
    args = p.parse_args()
    run = start_run("load", args.out)

    rng = random.Random(args.seed)
    model = resolve_model_path(args.model)
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    sglang_args = ["--sleep-on-idle"]
    plain = start_instance(InstanceSpec(model_path=model, port=free_port(), cpu=not has_cuda(), with_plugin=False,
                                        sglang_args=sglang_args, log_path=log_dir / "plain.log",
                                        cpu_threads=cpu_threads_per_instance(1)))  # as seer's one instance
    seer_proc = None
    try:
        wait_healthy([plain], timeout_s=900, progress=False)
        seer_proc, seer_url = launch_seer(model, ["--num-instances", "1", "--draft", "none", *sglang_args],
                                          log_dir / "seer")
        instance_url = httpx.get(f"{seer_url}/instances", timeout=30).json()["instances"][0]["url"]
        targets = {"plain": f"http://127.0.0.1:{plain.spec.port}", "instance": instance_url,
                   "frontend": seer_url}
        latency = latency_phase(targets, args, rng)
        stop_instances([plain])  # the soak has the machine to itself
        print(f"[soak] {args.clients} clients, {args.soak_rounds} rounds of {args.soak_s:.0f} s ...", flush=True)
        soak = asyncio.run(soak_phase(seer_url, psutil.Process(seer_proc.pid), args))
        print(f"[soak] {soak['requests']} requests: {soak['outcomes']}; samples {soak['samples']}; "
              f"lost {soak['lost']}, duplicated {soak['duplicated']}, drained in {soak['drained_s']} s", flush=True)
    finally:
        if seer_proc is not None:
            stop_processes([seer_proc], grace_s=60)
        stop_instances([plain])

    result = {
        "benchmark": "load", "hardware": "CPU (measured, not a GPU figure)",
        "cpus": psutil.cpu_count(), "config": {k: v for k, v in vars(args).items() if k not in ("out", "log_dir")},
        "mix": dict(MIX), "latency": latency, "soak": soak, "checks": checks(latency, soak),
    }
    out = run.write(result)
    plot(result, run.file("plot.png"))
    print(json.dumps(result["checks"], indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
