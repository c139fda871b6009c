"""One of two instances is killed mid-rollout; shared by the file-pool test (``test_faults.py``) and
the Mooncake one (``mooncake_migration.py``, run in its own network namespace)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import httpx
import psutil

from seer_sglang.config import KV_POOL

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
    # Moved samples whose first chunk elsewhere loaded nothing and took at least HiCache's prefetch
    # deadline: the survivor's prefetch never completed (a known defect, cause not found).
    stalled: int = 0

    def known_stall(self) -> bool:
        return bool(self.moved) and self.stalled == len(self.moved)


def instance_processes(server) -> list[psutil.Process]:
    """The SGLang server processes the launcher started (its direct children)."""
    return [p for p in psutil.Process(server.proc.pid).children(recursive=False)
            if "sglang.launch_server" in " ".join(p.cmdline())]


def kill_mid_rollout(server, min_tokens: int = 60, timeout_s: float = 300) -> KillResult:
    body = {"prompts": [{"input_ids": p} for p in PROMPTS], "n": 1, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True}
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(r=httpx.post(f"{server.url}/v1/rollout", json=body,
                                                                     timeout=600)))
    worker.start()
    # Kill once both instances hold chunks and returned chunks brought ``min_tokens`` per sample, so
    # each sample that moves has generated context (written to the pool by finished chunks).
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        inst = httpx.get(f"{server.url}/instances", timeout=10).json()["instances"]
        tokens = _chunk_tokens(httpx.get(f"{server.url}/metrics", timeout=10).text)
        if all(i["inflight_chunks"] for i in inst) and tokens >= min_tokens * len(PROMPTS):
            break
        time.sleep(0.05)
    victim = instance_processes(server)[0]
    cmd = victim.cmdline()
    victim_url = f"http://127.0.0.1:{cmd[cmd.index('--port') + 1]}"
    urls = [i["url"] for i in httpx.get(f"{server.url}/instances", timeout=10).json()["instances"]]
    victim_index = urls.index(victim_url)
    for p in [victim] + victim.children(recursive=True):
        p.kill()
    worker.join(600)
    r = box["r"]
    assert r.status_code == 200, r.text
    samples = r.json()["samples"]
    moved, kv_pages, pooled, stalled = [], 0, 0, 0
    for s in samples:
        reported = [c for c in s["chunks"] if c["weight_version"] is not None]
        first_away = next((j for j, c in enumerate(reported) if c["instance"] != victim_index), None)
        if not first_away:  # never on the victim, or never left it
            continue
        chunk = reported[first_away]
        context = sum(chunk["kv"].values())
        moved.append(s)
        kv_pages += (context - 1) // PAGE  # the KV of every context token but the last
        pooled += chunk["kv"]["pool"] // PAGE
        stalled += chunk["kv"]["pool"] == 0 and chunk["end"] - chunk["start"] >= KV_POOL.prefetch_timeout_s
    return KillResult(samples, victim_index, moved, kv_pages, pooled, stalled)


def _chunk_tokens(metrics: str) -> float:
    return sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("seer_chunk_tokens_total{"))
