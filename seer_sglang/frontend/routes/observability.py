"""What the frontend tells about itself: health, Prometheus metrics, the instances' load, the KV
pool, the rollout policy in use, and the per-instance telemetry over time."""

from __future__ import annotations

import asyncio
import dataclasses

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from .. import instance_metrics
from .common import frontend, policy_json

router = APIRouter()


@router.get("/health")
async def health(request: Request):
    fe = frontend(request)
    healthy = fe.engine.router.healthy_count()
    body = {"status": "ok" if healthy else "unavailable", "healthy_instances": healthy,
            "instances": len(fe.engine.instances.active())}
    supervisor = getattr(request.app.state, "supervisor", None)
    if supervisor is not None:  # restarts of the instances this server started; those that stay down
        body["supervisor"] = {**supervisor.status(), "held": {str(i): why for i, why in sorted(fe.held.items())}}
    return JSONResponse(body, status_code=200 if healthy else 503)


@router.get("/metrics")
async def prometheus_metrics(request: Request):
    """seer's own ``seer_*`` metrics, then every instance's ``sglang:*`` ones with an ``instance`` label."""
    fe = frontend(request)
    clients = fe.engine.instances.active()
    texts = await asyncio.gather(*(c.metrics() for c in clients))
    merged = instance_metrics.merge([(c.index, t) for c, t in zip(clients, texts) if t])
    return Response(fe.metrics.render() + merged.encode(), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/instances")
async def instances(request: Request):
    return {"instances": frontend(request).engine.instances.status()}


@router.get("/kv_pool")
async def kv_pool_info(request: Request):
    """The global KV pool as the frontend sees it (``file``): where, how big, what was evicted."""
    return await frontend(request).pool.info()


@router.get("/scheduler")
async def get_scheduler(request: Request):
    return policy_json(frontend(request).engine.policy)


@router.get("/timeline")
async def timeline(request: Request, since: float = 0.0):
    """Per-instance telemetry over time: KV usage, running/waiting, in-flight chunks, retractions."""
    engine = frontend(request).engine
    return {"points": [dataclasses.asdict(p) for p in engine.instances.timeline_since(since)],
            "retractions": list(engine.instances.retractions)}
