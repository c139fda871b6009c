"""The router's worker routes, answered as SGLang's router (sgl-model-gateway) answers them, for
trainers that find or register their engines through the router (slime and its forks).

``GET /workers`` lists the frontend itself first, then each instance behind it: a trainer that sends
``abort_all`` to "every worker" (slime's abort) reaches the frontend too, which aborts every queued and
running sample, not only the chunks the instances hold; a trainer that finds its own engine by URL
(slime's shutdown) finds it. Engines join and leave at run time through the gateway's API
(``POST /workers`` with a JSON body, ``DELETE /workers/{id}``: slime since v0.3.1) or the older
``POST /add_worker?url=`` and ``POST /remove_worker?url=``."""

from __future__ import annotations

import logging
from typing import Any

import yarl
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sglang.srt.utils.auth import AuthLevel, auth_level

from ..errors import APIError
from ..instance_client import InstanceClient
from .common import frontend

router = APIRouter()
logger = logging.getLogger("seer_sglang.frontend")


def _own_url(request: Request) -> str:
    """The frontend's URL as the caller reached it."""
    return str(request.base_url).rstrip("/")


# The schema says what _worker_url checks: a required http(s) address.
WORKER_URL = Query(..., min_length=8, max_length=2048, pattern=r"^\s*https?://[^/\s]+",
                   description="an SGLang server's http(s) address")


def _worker_url(url: str) -> str:
    """The address, checked as the instance client will use it: aiohttp's parse (yarl's, which refuses a
    backslash in the host), and the host name as the resolver encodes it (IDNA refuses an empty label,
    as in ``a..b``, or one over 63 characters)."""
    url = url.strip()
    try:
        parsed = yarl.URL(url)
        ok = parsed.scheme in ("http", "https") and bool(parsed.host)
        if ok:
            parsed.host.encode("idna")
    except (ValueError, UnicodeError, TypeError):
        ok = False
    if not ok:
        raise APIError(f"url must be an SGLang server's http(s) address, got {url!r}", param="url")
    return url.rstrip("/")


@router.get("/list_workers")
async def list_workers(request: Request):
    return {"urls": [_own_url(request)]}


FRONTEND_ID = "seer_sglang"


def _instance_id(index: int) -> str:
    return f"instance-{index}"


def _worker(fe, request: Request, index: int | None) -> dict[str, Any]:
    """One entry as the gateway's ``WorkerInfo``: the frontend (``index`` None) or an instance."""
    if index is None:
        return {"id": FRONTEND_ID, "url": _own_url(request), "model_id": fe.model.served_name, "priority": 50,
                "cost": 1.0, "worker_type": "regular", "is_healthy": fe.engine.router.healthy_count() > 0,
                "load": fe.engine.buffer.live_samples(), "connection_mode": "http",
                "instances": fe.engine.instances.status()}
    view = fe.engine.views[index]
    return {"id": _instance_id(index), "url": fe.engine.instances.clients[index].url, "model_id": fe.model.served_name,
            "priority": 50, "cost": 1.0, "worker_type": "regular", "is_healthy": view.healthy,
            "load": view.running + view.waiting, "connection_mode": "http"}


def _listed(fe) -> list[int]:
    return [c.index for c in fe.engine.instances.active()]


@router.get("/workers")
async def workers(request: Request):
    fe = frontend(request)
    entries = [_worker(fe, request, None)] + [_worker(fe, request, i) for i in _listed(fe)]
    healthy = sum(1 for e in entries if e["is_healthy"])
    return {"workers": entries, "total": len(entries),
            "stats": {"total_workers": len(entries), "healthy_workers": healthy, "total_models": 1,
                      "total_load": sum(e["load"] for e in entries[1:]),
                      "by_type": {"regular": len(entries), "prefill": 0, "decode": 0},
                      # the counts sgl-model-gateway 0.2 answered with
                      "prefill_count": 0, "decode_count": 0, "regular_count": len(entries)}}


def _index_of(fe, worker_id: str) -> int | None:
    """The instance a worker id names, or None for the frontend's own id; 404 for any other."""
    if worker_id == FRONTEND_ID:
        return None
    for index in _listed(fe):
        if worker_id in (_instance_id(index), fe.engine.instances.clients[index].url):
            return index
    raise APIError(f"no worker {worker_id!r} (GET /workers lists them)", 404, param="worker_id",
                   code="worker_not_found")


@router.get("/workers/{worker_id:path}")
async def worker(request: Request, worker_id: str):
    fe = frontend(request)
    return _worker(fe, request, _index_of(fe, worker_id))


class WorkerConfig(BaseModel):
    """sgl-model-gateway's ``WorkerConfigRequest``: what a trainer registers an engine with. Fields that
    tune the gateway's own health checks and priorities have no counterpart here and are accepted."""

    model_config = ConfigDict(extra="allow")

    url: str = Field(..., min_length=8, max_length=2048, pattern=r"^\s*https?://[^/\s]+")
    worker_type: str | None = Field(None, pattern="^(regular|prefill|decode)$")
    model_id: str | None = None
    api_key: str | None = None
    bootstrap_port: int | None = None


@router.post("/workers")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def create_worker(config: WorkerConfig, request: Request):
    """An engine joins, as with the gateway: 202 and its ``worker_id`` (the engine already takes
    chunks when the answer comes). Prefill and decode workers are refused: the instances here each
    run whole requests (no prefill-decode disaggregation)."""
    fe = frontend(request)
    if config.worker_type not in (None, "regular"):
        raise APIError(f"worker_type {config.worker_type!r} is not supported: seer_sglang's instances run "
                       "whole requests (no prefill-decode disaggregation); register it as 'regular'",
                       param="worker_type", code="unsupported_worker_type")
    url = _worker_url(config.url)
    index, status = await _join(fe, url)
    return JSONResponse({"success": True, "status": "accepted", "message": f"worker {url} {status}",
                         "worker_id": _instance_id(index), "url": url, "location": f"/workers/{_instance_id(index)}"},
                        status_code=202)


@router.delete("/workers/{worker_id:path}")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def delete_worker(request: Request, worker_id: str):
    """The engine leaves (as ``/remove_worker``): nothing more is sent to it, and chunks it runs finish
    there. The frontend itself cannot be removed."""
    fe = frontend(request)
    index = _index_of(fe, worker_id)
    if index is None:
        raise APIError("the frontend cannot remove itself; name one of its instances", param="worker_id",
                       code="not_removable")
    _leave(fe, index)
    return {"success": True, "status": "removed", "message": f"worker {worker_id} removed",
            "worker_id": _instance_id(index)}


async def _not_an_instance_of(fe, client: InstanceClient) -> APIError | None:
    """Why the server at ``client.url`` cannot join: not SGLang, another model, or a seer frontend
    (which would send the chunks back to itself)."""
    status, info = await client.get("/model_info")
    if status != 200 or not isinstance(info, dict):
        return APIError(f"{client.url} did not answer /model_info as an SGLang server does (HTTP {status})",
                        param="url", code="worker_unreachable")
    if not {fe.model.model_path, fe.model.served_name} & {info.get("model_path"), info.get("served_model_name")}:
        return APIError(f"{client.url} serves {info.get('model_path')!r}; this server serves "
                        f"{fe.model.model_path!r}", param="url", code="model_mismatch")
    status, server = await client.get("/server_info")
    if status == 200 and isinstance(server, dict) and "seer" in server:
        return APIError(f"{client.url} is a seer_sglang frontend, not an SGLang instance", param="url",
                        code="not_an_instance")
    return None


@router.post("/add_worker")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def add_worker(request: Request, url: str = WORKER_URL):
    """A running SGLang instance of the served model joins the deployment (again, if it was removed).
    Refused if it does not answer as SGLang or serves another model."""
    url = _worker_url(url)
    index, status = await _join(frontend(request), url)
    return {"status": status, "url": url, "instance": index}


async def _join(fe, url: str) -> tuple[int, str]:
    """The instance at ``url`` joins (or is already in); its index and what happened."""
    known = fe.engine.instances.find(url)
    if known is not None and known.index not in fe.engine.removed:
        return known.index, "already a worker"
    index = known.index if known is not None else len(fe.engine.instances.clients)
    client = InstanceClient(url, index, **fe.instance_args)
    refusal = await _not_an_instance_of(fe, client)
    if refusal is not None:
        await client.close()
        raise refusal
    problem = await fe.load_adapters(client)
    if problem is not None:
        await client.close()
        raise APIError(f"{url}: {problem}", param="url", code="worker_setup_failed")
    await fe.engine.instances.add(client)
    logger.info("worker added: instance %d is %s", index, url)
    return index, "added"


def _leave(fe, index: int) -> None:
    fe.engine.instances.remove(index)
    logger.info("worker removed: instance %d (%s)", index, fe.engine.instances.clients[index].url)


@router.post("/remove_worker")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def remove_worker(request: Request, url: str = WORKER_URL):
    """Nothing more is sent to the instance; chunks it is running finish there. It keeps running."""
    fe = frontend(request)
    url = _worker_url(url)
    known = fe.engine.instances.find(url)
    if known is None or known.index in fe.engine.removed:
        raise APIError(f"{url} is not a worker of this server", 404, param="url", code="worker_not_found")
    _leave(fe, known.index)
    return {"status": "removed", "url": url, "instance": known.index}
