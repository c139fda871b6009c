"""Decode step time while migrations load from the pool, with and without transfer scheduling.

    python -m benchmarks.transfer --model smollm2 --out benchmarks/results/cpu_transfer.json

Instance A fills the file pool with long contexts. Instance B decodes a steady batch (streamed, so
every token's arrival time is seen) while those contexts arrive as continuations and load from the
pool. B runs twice, once with the transfer scheduler off and once with it on; both report the
inter-token time of the decoding batch during the migration window and how long migrations took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.harness.result import start as start_run
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, has_cuda,
                                            start_instance, stop_instances, wait_healthy)
from seer_sglang.config import PluginConfig
from seer_sglang.launch.kv_pool import PoolSetup
from seer_sglang.models import resolve_model_path


def _spec(model: str, pool: PoolSetup, log: Path, env: dict[str, str], args) -> InstanceSpec:
    engine = ["--max-total-tokens", str(args.kv_tokens), "--dtype", args.dtype]
    return InstanceSpec(model_path=model, port=free_port(), sglang_args=engine + pool.instance_args(engine),
                        cpu=not has_cuda(), log_path=log, extra_env=env,
                        cpu_threads=cpu_threads_per_instance(2) if not has_cuda() else None)


async def _decode_stream(http: httpx.AsyncClient, url: str, ids: list[int], n: int, stamps: list[float]) -> None:
    body = {"input_ids": ids, "stream": True,
            "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}}
    async with http.stream("POST", f"{url}/generate", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data:") and "[DONE]" not in line:
                stamps.append(time.monotonic())


async def _migrate(http: httpx.AsyncClient, url: str, ids: list[int]) -> tuple[float, int]:
    t = time.monotonic()
    r = await http.post(f"{url}/generate", json={"input_ids": ids, "sampling_params": {
        "max_new_tokens": 1, "temperature": 0}})
    details = r.json()["meta_info"].get("cached_tokens_details") or {}
    return time.monotonic() - t, int(details.get("storage") or 0)


async def _trial(url: str, contexts: list[list[int]], args) -> dict:
    async with httpx.AsyncClient(timeout=None) as http:
        await http.post(f"{url}/flush_cache")
        streams: list[list[float]] = [[] for _ in range(args.decode_batch)]
        decoders = [asyncio.create_task(_decode_stream(http, url, [7 + i, 11, 13] * 20, args.decode_tokens, s))
                    for i, s in enumerate(streams)]
        await asyncio.sleep(args.warmup_s)
        t0 = time.monotonic()
        moves = await asyncio.gather(*(_migrate(http, url, c) for c in contexts))
        t1 = time.monotonic()
        await asyncio.gather(*decoders)
    gaps = [b - a for s in streams for a, b in zip(s, s[1:]) if t0 <= b <= t1]
    before = [b - a for s in streams for a, b in zip(s, s[1:]) if b < t0]
    gaps.sort()
    return {"itl_during_ms_p50": 1e3 * statistics.median(gaps) if gaps else None,
            "itl_during_ms_p99": 1e3 * gaps[int(0.99 * (len(gaps) - 1))] if gaps else None,
            "itl_during_ms_max": 1e3 * gaps[-1] if gaps else None,
            "itl_before_ms_p50": 1e3 * statistics.median(before) if before else None,
            "migration_window_s": t1 - t0, "migration_s_mean": statistics.mean(m[0] for m in moves),
            "tokens_from_pool": sum(m[1] for m in moves), "context_tokens": sum(len(c) for c in contexts)}


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.transfer")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--kv-tokens", type=int, default=16384)
    ap.add_argument("--contexts", type=int, default=6)
    ap.add_argument("--context-tokens", type=int, default=1024)
    ap.add_argument("--decode-batch", type=int, default=8)
    ap.add_argument("--decode-tokens", type=int, default=160)
    ap.add_argument("--warmup-s", type=float, default=3.0)
    ap.add_argument("--starvation-steps", type=int, default=4)
    ap.add_argument("--out", default="benchmarks/results/cpu_transfer.json")
    args = ap.parse_args()
    run = start_run("transfer", args.out)
    model = resolve_model_path(args.model)
    logs = Path(tempfile.mkdtemp(prefix="seer-transfer-"))
    pool = PoolSetup(kind="file", directory=logs / "pool", cpu=not has_cuda())
    pool.directory.mkdir()
    contexts = [[(97 * i + 31 * j) % 20000 + 100 for j in range(args.context_tokens)] for i in range(args.contexts)]
    writer = start_instance(_spec(model, pool, logs / "writer.log", {}, args))
    results = {}
    try:
        wait_healthy([writer], progress=False)
        with httpx.Client(timeout=None) as http:  # fill the pool: prefill each context once on A
            for c in contexts:
                http.post(f"{writer.url}/generate", json={"input_ids": c, "sampling_params": {"max_new_tokens": 1}})
        time.sleep(1.0)
        for name, env in (("off", PluginConfig(transfer_scheduler=False).to_env()),
                          ("on", PluginConfig(transfer_scheduler=True,
                                              transfer_starvation_steps=args.starvation_steps).to_env())):
            reader = start_instance(_spec(model, pool, logs / f"reader-{name}.log", env, args))
            try:
                wait_healthy([reader], progress=False)
                results[name] = asyncio.run(_trial(reader.url, contexts, args))
                print(name, json.dumps(results[name]), flush=True)
            finally:
                stop_instances([reader])
    finally:
        stop_instances([writer])
    report = {"config": {**vars(args), "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, "
                                                   f"{'GPU' if has_cuda() else 'CPU'}"},
              "trials": results,
              "ratio_itl_p99_on_vs_off": (results["on"]["itl_during_ms_p99"] / results["off"]["itl_during_ms_p99"]
                                          if results["off"]["itl_during_ms_p99"] else None)}
    print(f"wrote {run.write(report)}")


if __name__ == "__main__":
    main()
