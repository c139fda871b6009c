"""Where sglang-router's ``cache_aware`` places requests, against the simulator's model of it.

    python -m benchmarks.router_probe                                              # prints
    python -m benchmarks.router_probe --out benchmarks/results/router_probe/<date>-<label>  # and stores

The ``plain-router`` baseline is simulated by ``core.policy.CacheAwarePolicy``; a held-out run shows
whether that model predicts the rollout, this shows whether it places requests as the router does. The
real router (PyPI ``sglang-router``, the ``bench`` extra) runs in front of stand-in workers that record
which of them gets each ``/generate`` and answer it after ``hold_s``: no SGLang, no model, seconds. Each
case sends its requests one after another, ``GAP_S`` apart, so the router sees them in turn: once with the
workers holding every request open (the router's in-flight counts grow, as in a rollout's burst) and once
answering at once (every count is back to 0 before the next request). The model places the same
requests with the same counts. The two agree when their placements are the same up to the instances'
names: the router breaks ties in an order its process fixes. Beside them, the rule the router's
documentation gives for a request that matches nothing ("the worker with the smallest tree"), so a
case shows which of the two rules the router follows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from pathlib import Path

import httpx

from benchmarks.harness.result import start as start_run
from benchmarks.harness.sglang_router import start_router, stop_router
from seer_sglang.core.policy import CacheAwarePolicy, InstanceView
from seer_sglang.core.request import Group, SamplingParams
from seer_sglang.launch.instances import free_port
from seer_sglang.launch.waiting import wait_until

GAP_S = 0.05  # between two requests: the router has placed one before the next arrives
HOLD_S = 2.0  # a held request stays open past the case's last request
TEMPLATE = list(range(900, 916))  # a chat template's ids before each question

# case -> the requests' input_ids, sent in this order
CASES = {
    "texts that match nothing": [list(range(1, 31)), [50, 60], [70, 80], [90, 91], [92, 93], [94, 95]],
    "siblings, then texts that match nothing": [list(range(1, 31))] * 3 + [[50, 60], [50, 60], [70, 80]],
    "a shared chat template": [TEMPLATE + [1, 2, 3], TEMPLATE + [4, 5, 6], TEMPLATE + [7, 8, 9],
                               TEMPLATE + [10, 11, 12], [50, 60], [70, 80]],
}


class StandInWorkers:
    """``n`` local HTTP workers, each recording the rid of every ``/generate`` it gets; ``hold_s`` says
    how long one keeps a request open before it answers."""

    def __init__(self, n: int):
        self.hold_s = 0.0
        self.placed: dict[str, int] = {}
        self.servers, self.urls = [], []
        for index in range(n):
            port = free_port()
            self.servers.append(self._serve(index, port))
            self.urls.append(f"http://127.0.0.1:{port}")
        wait_until(lambda: all(s.started for s in self.servers), 30, what="stand-in workers")

    def _serve(self, index: int, port: int):
        import uvicorn
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def generate(request):
            body = await request.json()
            self.placed[body["rid"]] = index
            await asyncio.sleep(self.hold_s)
            return JSONResponse({"text": "", "output_ids": [0],
                                 "meta_info": {"id": body["rid"], "finish_reason": {"type": "length"}}})

        async def other(request):  # health and the router's worker checks
            return JSONResponse({"model_path": "stand-in", "is_generation": True})

        app = Starlette(routes=[Route("/generate", generate, methods=["POST"]),
                                Route("/{path:path}", other, methods=["GET", "POST"])])
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", access_log=False))
        threading.Thread(target=server.run, daemon=True, name=f"stand-in-{port}").start()
        return server

    def stop(self) -> None:
        for s in self.servers:
            s.should_exit = True


def router_placements(workers: StandInWorkers, requests: list[list[int]], hold: bool, log: Path) -> list[int]:
    """The instance the real router gives each request (a fresh router process per case)."""
    workers.hold_s, workers.placed = (HOLD_S if hold else 0.0), {}
    router = start_router(workers.urls, "cache_aware", log)
    try:
        async def send() -> None:
            async with httpx.AsyncClient(timeout=60) as http:
                tasks = []
                for k, ids in enumerate(requests):
                    tasks.append(asyncio.create_task(http.post(f"{router.url}/generate", json={
                        "input_ids": ids, "rid": f"probe-{k}", "sampling_params": {"max_new_tokens": 1}})))
                    await asyncio.sleep(GAP_S)
                for r in await asyncio.gather(*tasks):
                    r.raise_for_status()
        asyncio.run(send())
    finally:
        stop_router(router)
    return [workers.placed[f"probe-{k}"] for k in range(len(requests))]


def model_placements(requests: list[list[int]], instances: int, hold: bool) -> list[int]:
    """The instance ``CacheAwarePolicy`` gives each request, the counts in flight as the case has them."""
    policy, views = CacheAwarePolicy(), [InstanceView(i) for i in range(instances)]
    out = []
    for k, ids in enumerate(requests):
        sample = Group.make(f"probe-{k}", ids, 1, SamplingParams(max_new_tokens=1)).samples[0]
        target = policy.pick(views, sample)
        target.inflight += 1 if hold else 0
        out.append(target.index)
    return out


def smallest_tree_placements(requests: list[list[int]], instances: int) -> list[int]:
    """The documented rule: a text whose match is 30% of it or less goes to the instance whose tree holds
    the fewest characters (a prefix its texts share counted once); a longer match goes where it was sent."""
    sent: dict[int, list[str]] = {i: [] for i in range(instances)}
    size = dict.fromkeys(range(instances), 0)
    out = []
    for ids in requests:
        text = " ".join(map(str, ids))
        shared = {i: max((len(os.path.commonprefix([text, t])) for t in sent[i]), default=0) for i in sent}
        best = max(shared.values())
        target = (min(i for i in sent if shared[i] == best) if best / len(text) > 0.3
                  else min(sent, key=lambda i: (size[i], i)))
        size[target] += len(text) - shared[target]
        sent[target].append(text)
        out.append(target)
    return out


def named_in_order(placements: list[int]) -> list[int]:
    """Placements with the instances renamed in the order they first appear: equal up to names."""
    names: dict[int, int] = {}
    return [names.setdefault(p, len(names)) for p in placements]


def probe(instances: int = 2, log_dir: Path = Path("/tmp/seer-router-probe"),
          runs: list[tuple[str, bool]] | None = None) -> list[dict]:
    """Each ``(case, held_open)`` of ``runs`` (default: every case, held open and answered at once): the
    router's placements, the model's and the documented rule's, and whether each agrees with the router."""
    runs = runs or [(name, hold) for name in CASES for hold in (True, False)]
    workers = StandInWorkers(instances)
    rows = []
    try:
        for name, hold in runs:
            requests = CASES[name]
            real = router_placements(workers, requests, hold, log_dir / f"router-{len(rows)}.log")
            model = model_placements(requests, instances, hold)
            documented = smallest_tree_placements(requests, instances)
            rows.append({"case": name, "held_open": hold, "router": real, "model": model,
                         "documented_rule": documented,
                         "model_agrees": named_in_order(model) == named_in_order(real),
                         "documented_rule_agrees": named_in_order(documented) == named_in_order(real)})
    finally:
        workers.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--out", help="store the result (benchmarks.harness.result)")
    args = ap.parse_args()
    out = start_run("router_probe", args.out) if args.out else None
    started = time.time()
    rows = probe(args.instances)
    for r in rows:
        print(f"{r['case']:42s} {'held open' if r['held_open'] else 'answered':9s} router {r['router']} "
              f"model {r['model']} ({'agrees' if r['model_agrees'] else 'DIFFERS'}) documented rule "
              f"{r['documented_rule']} ({'agrees' if r['documented_rule_agrees'] else 'differs'})")
    if out is not None:
        import importlib.metadata

        out.write({"label": "the real sglang-router in front of stand-in workers (no SGLang, no model): where it "
                            "places each request, against the simulator's model of its cache_aware policy",
                   "router_version": importlib.metadata.version("sglang-router"), "instances": args.instances,
                   "gap_s": GAP_S, "hold_s": HOLD_S, "wall_s": time.time() - started, "cases": rows})
        print(f"wrote {out.folder}")


if __name__ == "__main__":
    main()
