"""One of two instances is killed mid-rollout; shared by the file-pool test (``test_faults.py``) and
the Mooncake one (``mooncake_migration.py``, run in its own network namespace)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import httpx

from seer_sglang.benchmarking.kill import chunk_tokens_done, kill_instance, moved_chunks
from seer_sglang.launch.waiting import wait_until

PAGE = 16
# Distinct prompts of 40 tokens: no sample can find another's KV on the survivor's device, so a
# moved continuation's context can only come from the pool (or be recomputed).
PROMPTS = [[5 + i, 17, 300 + 7 * i, 42, 1000 + i] * 8 for i in range(24)]
MAX_TOKENS = 240


@dataclass
class KillResult:
    samples: list[dict]
    victim: int  # the killed instance's index
    moved: list[dict]  # samples that ran only on the victim until it died, then continued elsewhere
    kv_pages: int  # whole pages of KV the moved samples had when they moved
    pool_pages: int  # ... of which their first chunk elsewhere loaded from the pool


def kill_mid_rollout(server, min_tokens: int = 60, timeout_s: float = 300) -> KillResult:
    body = {"prompts": [{"input_ids": p} for p in PROMPTS], "n": 1, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True}
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(r=httpx.post(f"{server.url}/v1/rollout", json=body,
                                                                     timeout=600)))
    worker.start()
    # Kill once both instances hold chunks and returned chunks brought ``min_tokens`` per sample, so
    # each sample that moves has generated context (written to the pool by finished chunks).
    wait_until(lambda: all(i["inflight_chunks"] for i in httpx.get(f"{server.url}/instances", timeout=10).json()["instances"])
               and chunk_tokens_done(server.url) >= min_tokens * len(PROMPTS), timeout_s, 0.05,
               f"both instances busy and {min_tokens} tokens per sample returned")
    victim_index = kill_instance(server.url, server.proc.pid)
    worker.join(600)
    r = box["r"]
    assert r.status_code == 200, r.text
    samples = r.json()["samples"]
    moved, kv_pages, pooled = [], 0, 0
    for s, chunk in moved_chunks(samples, victim_index):
        context = sum(chunk["kv"].values())
        moved.append(s)
        kv_pages += (context - 1) // PAGE  # the KV of every context token but the last
        pooled += chunk["kv"]["pool"] // PAGE
    return KillResult(samples, victim_index, moved, kv_pages, pooled)
