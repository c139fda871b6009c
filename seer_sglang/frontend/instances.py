"""The SGLang instances as the frontend sees them: their clients, load polls, health, membership and
the calls fanned out to all of them. Apart from chunk I/O (``engine.py``), which sends the router's
launches to these clients; what the router knows of each instance (its ``InstanceView``) is set here,
through the router's events (``instance_seen``, ``remove_instance``, ``readmit``).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from typing import Any, Callable

from ..config import SLO_CONFIG
from ..core.router import Load, Router
from ..core.slo import fitted_step_time, step_time
from ..core.step_model import StepModel
from .instance_client import InstanceClient

logger = logging.getLogger("seer_sglang.frontend")


@dataclasses.dataclass
class LoadPoint:
    """One telemetry sample of one instance, for timelines (KV usage, running, retractions)."""

    t: float
    instance: int
    healthy: bool
    kv_used: int
    kv_capacity: int
    running: int
    waiting: int
    inflight: int
    retractions: int  # retractions reported by finished chunks on this instance so far


class Instances:
    def __init__(self, clients: list[InstanceClient], router: Router, *, changed: Callable[[], None],
                 instance_down_s: float, timeline_len: int = 200_000,
                 on_load: Callable[[int, Any], None] | None = None,
                 on_slo_report: Callable[[int, dict[str, Any]], None] | None = None):
        self.clients = clients
        self.router = router
        self.changed = changed  # wakes the dispatch loop: what the router reads changed
        self.instance_down_s = instance_down_s
        self.on_load, self.on_slo_report = on_load, on_slo_report
        self.timeline: collections.deque[LoadPoint] = collections.deque(maxlen=timeline_len)
        self.last_answer_at: dict[int, float] = {}  # instance -> when a chunk last got an answer from it
        self._down_since: dict[int, float] = {}  # instance -> when its polls began to fail
        # SGLang memory tags each instance gave back (sleep mode); while any KV cache is, nothing is dispatched
        self.released_memory: dict[int, set[str]] = collections.defaultdict(set)
        self.slo_seen = False  # an SLO request came: the instances' step-time fits are read with their loads
        self._slo_fits_at = 0.0
        self.slo_reports: dict[int, dict[str, Any]] = {}  # instance -> its plugin's seer_slo report

    # ---- membership (the router's worker routes) ---------------------------------------------
    def active(self) -> list[InstanceClient]:
        """The instances in the deployment: calls fanned out to "every instance" go to these."""
        return [c for c in self.clients if c.index not in self.router.removed]

    def find(self, url: str) -> InstanceClient | None:
        url = url.rstrip("/")
        return next((c for c in self.clients if c.url == url), None)

    async def add(self, client: InstanceClient) -> None:
        """A running SGLang instance joins: it gets chunks from the next dispatch on. ``client.index``
        is the next index, or a removed instance's own (the same URL comes back)."""
        if client.index == len(self.clients):
            self.clients.append(client)
            self.router.add_instance()
        else:
            old = self.clients[client.index]
            self.clients[client.index] = client
            await old.close()
        await self.readmit(client.index)

    def remove(self, index: int) -> None:
        """An instance leaves: nothing more is dispatched to it; its chunks in flight finish there. Its
        view stays down, since load polls skip removed instances (``poll``)."""
        self.router.remove_instance(index)
        self.changed()

    async def readmit(self, index: int) -> None:
        """An instance taken out (``remove``) gets chunks again, its client as it was."""
        self.router.readmit(index)
        await self.poll()
        self.changed()

    async def close(self) -> None:
        for client in self.clients:
            await client.close()

    # ---- read API for the routes -------------------------------------------------------------
    def healthy_count(self) -> int:
        return self.router.healthy_count()

    def status(self) -> list[dict[str, Any]]:
        return [{"index": v.index, "url": self.clients[v.index].url, "healthy": v.healthy, "running": v.running,
                 "waiting": v.waiting, "used_tokens": v.used_tokens, "capacity_tokens": v.capacity_tokens,
                 "inflight_chunks": v.inflight} for v in self.router.views if v.index not in self.router.removed]

    def timeline_since(self, t: float) -> list[LoadPoint]:
        return [p for p in self.timeline if p.t >= t]

    @property
    def retractions(self) -> list[int]:
        """SGLang's retractions of our chunks, per instance (as the chunks reported them)."""
        return [v.retractions for v in self.router.views]

    async def broadcast(self, path: str, body: dict[str, Any] | list[dict[str, Any]] | None, *,
                        method: str = "POST", params: dict[str, Any] | None = None,
                        control: bool = False) -> list[dict[str, Any]]:
        """One call on every instance (POST: an admin call, with one body for all or one per instance;
        GET: a read); each instance's status and answer. An instance marked down is not called: its
        entry says so (status 503, ``skipped``), and a hung one cannot hold up the others' answers.
        ``control``: a call with the short timeout (``InstanceClient.post_admin``)."""
        clients = self.active()
        bodies = body if isinstance(body, list) else [body] * len(clients)

        async def call(client: InstanceClient, b: Any) -> dict[str, Any]:
            entry = {"instance": client.index, "url": client.url}
            if not self.router.views[client.index].healthy:
                return {**entry, "status": 503, "skipped": True,
                        "body": {"error": f"instance {client.index} is marked down; not called"}}
            status, content = await (client.post_admin(path, b, control=control) if method == "POST"
                                     else client.get(path, params))
            return {**entry, "status": status, "body": content}

        return list(await asyncio.gather(*(call(c, b) for c, b in zip(clients, bodies))))

    # ---- memory given back (sleep mode) ------------------------------------------------------
    @property
    def memory_released(self) -> bool:
        return any("kv_cache" in self.released_memory[c.index] for c in self.active())

    def mark_memory(self, index: int, tags: set[str], released: bool) -> None:
        """Record that instance ``index`` gave ``tags`` back (or took them again)."""
        if released:
            self.released_memory[index] |= tags
        else:
            self.released_memory[index] -= tags
        self.changed()

    # ---- telemetry -------------------------------------------------------------------------
    async def poll(self) -> list[int]:
        """Read every instance's load; returns the instances that have failed their polls for
        ``instance_down_s`` (a request to one that stopped answering, SIGSTOP or a hung scheduler,
        never returns: the engine gives up its chunks)."""
        clients = self.active()
        results = await asyncio.gather(*(c.load() for c in clients), return_exceptions=True)
        stalled = []
        for client, result in zip(clients, results):
            if client.index in self.router.removed:
                continue  # removed while the poll was out: it stays out of dispatch
            view = self.router.views[client.index]
            load = None if isinstance(result, BaseException) else Load(
                result.max_total_tokens, result.used_tokens, result.running, result.waiting)
            if self.router.instance_seen(client.index, load):
                logger.warning("instance %d (%s) is %s", view.index, client.url, "back up" if view.healthy else "DOWN")
                self.changed()
            if self._stalled(view.index, view.healthy):
                stalled.append(view.index)
            self.timeline.append(LoadPoint(time.time(), view.index, view.healthy, view.used_tokens,
                                           view.capacity_tokens, view.running, view.waiting, view.inflight,
                                           view.retractions))
            if self.on_load:
                self.on_load(view.index, view)
        if self.slo_seen and time.monotonic() - self._slo_fits_at >= SLO_CONFIG.report_interval_s:
            self._slo_fits_at = time.monotonic()
            await self.read_slo_fits(clients)
        return stalled

    def _stalled(self, index: int, healthy: bool) -> bool:
        if healthy:
            self._down_since.pop(index, None)
            return False
        since = self._down_since.setdefault(index, time.monotonic())
        return time.monotonic() - since >= self.instance_down_s

    def slo_counters(self) -> dict[str, int]:
        """The instances' best-effort decode slots in steps with SLO requests, summed (last reports)."""
        return {key: sum(int(r.get(key, 0)) for r in self.slo_reports.values())
                for key in ("best_effort_decoded", "best_effort_deferred")}

    async def read_slo_fits(self, clients: list[InstanceClient]) -> None:
        """Each instance's own decode step-time fit (the plugin's ``seer_slo`` report), for routing."""
        infos = await asyncio.gather(*(c.server_info() for c in clients), return_exceptions=True)
        for client, info in zip(clients, infos):
            if isinstance(info, BaseException):
                continue
            report = ((info.get("internal_states") or [{}])[0] or {}).get("seer_slo") or {}
            self.slo_reports[client.index] = report
            if self.on_slo_report:
                self.on_slo_report(client.index, report)
            fit, model = report.get("fit"), report.get("model")
            view = self.router.views[client.index]
            if model:  # an emulated instance decides by its profile
                view.step_s = step_time(StepModel.from_dict(model, strict=False))
            else:
                view.step_s = fitted_step_time(fit["base_s"], fit["per_seq_s"]) if fit else None
