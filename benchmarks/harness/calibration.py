"""Step times of a run's real engines: the efficiency bound of every run, and the step model of a CPU run
(the simulator's model of the instances it checks)."""

from __future__ import annotations

import asyncio
import random
import statistics
import time

import httpx


def calibrate(urls: list[str], prompt: list[int], kv_cap: int, batches: tuple[int, ...] = (1, 4, 16, 64),
              steps: int = 64) -> dict:
    """Step times of the real engines, for the efficiency bound and the CPU step model."""

    async def decode(batch: int, tokens: int, context: int = 0) -> float:
        ids = (prompt * (context // len(prompt) + 1))[:max(context, len(prompt))]
        async with httpx.AsyncClient(timeout=None) as http:
            body = {"input_ids": [ids] * batch, "sampling_params": {"max_new_tokens": tokens, "temperature": 0,
                                                                    "ignore_eos": True}}
            t0 = time.perf_counter()
            await asyncio.gather(*(http.post(f"{u}/generate", json=body) for u in urls))
            return time.perf_counter() - t0

    async def prefill(length: int) -> float:
        rng = random.Random(time.time())  # fresh tokens: no radix-cache hit
        async with httpx.AsyncClient(timeout=None) as http:
            t0 = time.perf_counter()
            await asyncio.gather(*(http.post(f"{u}/generate", json={
                "input_ids": [rng.randrange(3, 1000) for _ in range(length)],
                "sampling_params": {"max_new_tokens": 1}}) for u in urls))
            return time.perf_counter() - t0

    asyncio.run(decode(1, 8))  # warm-up
    per_batch = {}
    for batch in batches:
        elapsed = asyncio.run(decode(batch, steps))
        per_batch[batch] = elapsed / steps  # every instance runs this batch at once, as in a rollout
    xs = list(per_batch)
    slope = (per_batch[xs[-1]] - per_batch[xs[0]]) / (xs[-1] - xs[0])
    base = per_batch[1] - slope
    mid = batches[len(batches) // 2]
    context = min(1024, kv_cap // (2 * mid))  # a rollout's contexts, within half the KV at this batch
    asyncio.run(decode(mid, 4, context))  # cache the long prompt: time decode, not prefill
    long_step = asyncio.run(decode(mid, steps, context)) / steps
    per_kv = max(0.0, (long_step - per_batch[mid]) / (mid * context))
    pre = asyncio.run(prefill(2000)) / 2000
    peak = max(b * len(urls) / t for b, t in per_batch.items())
    # A one-token request on a cached prompt is all overhead but one forward: HTTP, tokenizing, scheduling.
    overhead = statistics.median(asyncio.run(decode(1, 1)) for _ in range(5)) - per_batch[1]
    # Each batch's step without the KV read of its short context: the fit's piecewise batch term.
    points = [[b, max(1e-4, t - per_kv * b * len(prompt))] for b, t in sorted(per_batch.items())]
    return {"step_s_by_batch": per_batch, "decode_batch_s": points, "min_step_s": per_batch[1], "peak_tok_s": peak,
            "prefill_s_per_token": pre, "decode_base_s": max(base, 1e-4), "decode_per_seq_s": max(slope, 0.0),
            "decode_per_kv_token_s": per_kv, "capacity_tokens": kv_cap, "request_overhead_s": max(0.0, overhead)}


def calib_batches(args) -> tuple[int, ...]:
    return tuple(int(b) for b in args.calib_batches.split(","))
