"""sglang-router in front of plain SGLang instances, and the instances' own retraction counters.

slime sends each sample as its own ``/generate`` through sglang-router, so the plain SGLang a trainer
runs is the instances behind that router; the rollout benchmark starts the real router (PyPI
``sglang-router``, the ``bench`` extra) as a process for each plain-router rollout, so every rollout
starts from an empty routing tree just as the instances start from flushed caches, and stops it by pid.

Retractions are counted where they happen: each SGLang instance started with ``--enable-metrics``
keeps ``sglang:num_retracted_requests_total`` on its Prometheus ``/metrics``; a mode's retractions are
the difference of the sum over instances before and after its rollout, the same counter for plain and
seer modes, rather than what each answer reports of itself.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from seer_sglang.launch.instances import free_port
from seer_sglang.launch.waiting import ProcessExited, wait_healthy, wait_until

RETRACTIONS = "sglang:num_retracted_requests_total"
# A rollout's requests wait in the instances' queues, not in the router's: no rate limit, no timeout
# shorter than an emulated rollout, no retries that would send a sample twice.
REQUEST_TIMEOUT_S = 36000


def router_command(worker_urls: list[str], policy: str, port: int, prometheus_port: int) -> list[str]:
    """``python -m sglang_router.launch_router`` on 127.0.0.1 over ``worker_urls`` with ``policy``."""
    return [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
            "--worker-urls", *worker_urls, "--policy", policy, "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(prometheus_port), "--request-timeout-secs", str(REQUEST_TIMEOUT_S),
            "--max-concurrent-requests", "-1", "--disable-retries", "--disable-circuit-breaker",
            "--log-level", "warn"]


@dataclass
class Router:
    popen: subprocess.Popen
    url: str
    log_path: Path


def start_router(worker_urls: list[str], policy: str, log_path: Path, timeout: float = 120) -> Router:
    """Start the router and return once it answers ``/health`` and lists every worker."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    popen = subprocess.Popen(router_command(worker_urls, policy, port, free_port()), stdin=subprocess.DEVNULL,
                             stdout=open(log_path, "ab"), stderr=subprocess.STDOUT)
    router = Router(popen, f"http://127.0.0.1:{port}", log_path)
    try:
        wait_healthy(router.url, timeout, process=popen, log_path=log_path)
        wait_until(lambda: len(router_workers(router.url)) >= len(worker_urls), timeout,
                   what=f"sglang-router at {router.url} listing {len(worker_urls)} workers")
    except (TimeoutError, ProcessExited):
        stop_router(router)
        raise
    return router


def router_workers(url: str) -> list:
    """The workers the router routes to (``/list_workers`` or ``/workers``, by router version)."""
    for path in ("/list_workers", "/workers"):
        try:
            r = httpx.get(f"{url}{path}", timeout=5)
        except httpx.HTTPError:
            continue
        if r.status_code == 200:
            data = r.json()
            found = data.get("urls", data.get("workers", [])) if isinstance(data, dict) else data
            if found:
                return found
    return []


def stop_router(router: Router, grace_s: float = 15) -> None:
    """Stop this router process by its pid: terminate, then kill if it lingers."""
    if router.popen.poll() is None:
        router.popen.terminate()
        try:
            router.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            router.popen.kill()
            router.popen.wait(grace_s)


def counter_value(text: str, name: str) -> float | None:
    """The sum over label sets of counter ``name`` in a Prometheus text exposition (None if absent)."""
    total, found = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        rest = line[len(name):]
        if rest[:1] not in ("{", " "):
            continue  # another metric whose name starts with this one
        total += float(line.rsplit(None, 1)[-1])
        found = True
    return total if found else None


def retraction_counts(urls: list[str]) -> list[float | None]:
    """Each instance's retraction counter now (None where ``/metrics`` does not give it)."""
    out = []
    for url in urls:
        try:
            r = httpx.get(f"{url}/metrics", timeout=30)
            # an instance that has served with metrics on but never retracted has no sample of the counter yet
            on = r.status_code == 200 and "sglang:" in r.text
            out.append((counter_value(r.text, RETRACTIONS) or 0.0) if on else None)
        except httpx.HTTPError:
            out.append(None)
    return out


def retraction_delta(before: list[float | None], after: list[float | None]) -> dict:
    """A rollout's retractions: the total and per instance; the total is None unless every instance
    gave its counter both times."""
    per = [None if a is None or b is None else a - b for b, a in zip(before, after)]
    return {"total": sum(per) if per and None not in per else None, "per_instance": per}
