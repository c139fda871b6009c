"""sglang-router in front of plain SGLang instances, and the instances' own retraction counters.

slime sends each sample as its own ``/generate`` through sglang-router, so the plain SGLang a trainer
runs is the instances behind that router; the rollout benchmark starts the real router (PyPI
``sglang-router``, the ``bench`` extra) as a process for each plain-router rollout, so every rollout
starts from an empty routing tree just as the instances start from flushed caches, and stops it by pid.

The router forwards a typed request: it keeps ``rid``, ``custom_logit_processor`` and the ordinary
sampling parameters, but drops ``sampling_params.custom_params``, where each sample's hidden target
length travels (sglang-router 0.3.2, checked against an echo worker). Without it every sample would run
to ``--max-tokens`` and the router modes would write another workload. So each worker URL the router
is given is a ``ParamsShim`` in front of one instance: it passes every request through unchanged and
puts back the ``custom_params`` of a ``/generate`` by its ``rid``. The router still chooses the
instance by its own policy; the instance sees what the benchmark sent. The shim's hop is local.

Retractions are counted where they happen: each SGLang instance started with ``--enable-metrics``
keeps ``sglang:num_retracted_requests_total`` on its Prometheus ``/metrics``, and beside it the prompt
and output tokens of the requests it retracted (``sglang:num_retracted_input_tokens_total``,
``..._output_tokens_total``): what a retracted request has to prefill again when it is readmitted,
less what the radix cache still holds of it. A mode's figures are the difference of the sums over
instances before and after its rollout, the same counters for plain and seer modes, rather than what
each answer reports of itself. Retraction is the only way a running request loses its place here: no
instance of the rollout benchmark runs SGLang's priority scheduling, whose preemption is the other.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from seer_sglang.launch.instances import free_port
from seer_sglang.launch.waiting import ProcessExited, wait_healthy, wait_until

RETRACTIONS = "sglang:num_retracted_requests_total"
RETRACTED_TOKENS = {"input_tokens": "sglang:num_retracted_input_tokens_total",
                    "output_tokens": "sglang:num_retracted_output_tokens_total"}
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


class ParamsShim:
    """One instance behind a local pass-through that restores each ``/generate``'s ``custom_params`` by
    its ``rid`` (``params``, filled before a rollout), served from a thread of this process. It also
    keeps each rid it passed on with when it came (``received``: rid -> wall-clock seconds, in the order
    they came): where and when the router delivered each sample, which its order (``cache_aware``) or its
    draws (``power_of_two`` in front of SGLang 0.5.23) decide, and no other run repeats."""

    def __init__(self, target: str):
        self.target, self.params = target, {}
        self.received: dict[str, float] = {}
        self.url, self._server, self._thread = None, None, None

    def _app(self):
        import json

        from starlette.applications import Starlette
        from starlette.responses import Response
        from starlette.routing import Route

        client: dict = {}

        async def forward(request):
            http = client.get("http")
            if http is None:  # one client on the server's own loop
                http = client["http"] = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None))
            body = await request.body()
            if request.method == "POST" and request.url.path == "/generate":
                data = json.loads(body)
                self.received.setdefault(data.get("rid"), time.time())  # a resent rid keeps its first arrival
                restored = self.params.get(data.get("rid"))
                if restored is not None:
                    data.setdefault("sampling_params", {})["custom_params"] = restored
                    body = json.dumps(data).encode()
            r = await http.request(request.method, f"{self.target}{request.url.path}", content=body,
                                   params=request.query_params,
                                   headers={"content-type": request.headers.get("content-type", "application/json")})
            return Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type"))

        return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST", "PUT", "DELETE"])])

    def start(self, timeout: float = 30) -> "ParamsShim":
        import threading

        import uvicorn

        port = free_port()
        self._server = uvicorn.Server(uvicorn.Config(self._app(), host="127.0.0.1", port=port, log_level="error",
                                                     access_log=False))
        self._thread = threading.Thread(target=self._server.run, daemon=True, name=f"params-shim-{port}")
        self._thread.start()
        self.url = f"http://127.0.0.1:{port}"
        wait_until(lambda: self._server.started, timeout, what=f"params shim at {self.url}")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(30)


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


def retraction_counts(urls: list[str]) -> list[dict | None]:
    """Each instance's retraction counters now: ``requests`` and the retracted requests' ``input_tokens``
    and ``output_tokens`` (None where ``/metrics`` does not give them)."""
    out = []
    for url in urls:
        try:
            r = httpx.get(f"{url}/metrics", timeout=30)
        except httpx.HTTPError:
            out.append(None)
            continue
        # an instance that has served with metrics on but never retracted has no sample of the counters yet
        if r.status_code != 200 or "sglang:" not in r.text:
            out.append(None)
            continue
        out.append({"requests": counter_value(r.text, RETRACTIONS) or 0.0,
                    **{key: counter_value(r.text, name) or 0.0 for key, name in RETRACTED_TOKENS.items()}})
    return out


def retraction_delta(before: list[dict | None], after: list[dict | None]) -> dict:
    """A rollout's retractions: the total and per instance, and the retracted requests' tokens
    (``recomputed_tokens``, prompt and output); a total is None unless every instance gave its
    counters both times."""
    per = [None if a is None or b is None else {k: a[k] - b[k] for k in a} for b, a in zip(before, after)]
    whole = bool(per) and None not in per

    def total(key: str) -> float | None:
        return sum(p[key] for p in per) if whole else None
    inputs, outputs = total("input_tokens"), total("output_tokens")
    return {"total": total("requests"), "per_instance": [None if p is None else p["requests"] for p in per],
            "input_tokens": inputs, "output_tokens": outputs,
            "recomputed_tokens": None if inputs is None else inputs + outputs}
