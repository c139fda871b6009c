"""The router's worker routes, answered as SGLang's router (sgl-model-gateway) answers them, for
trainers that find or register their engines through the router (slime and its forks).

From outside, seer is one worker: ``GET /workers`` and ``GET /list_workers`` name the frontend itself,
so a trainer that sends ``abort_all`` to "every worker" aborts every queued and running sample through
it, not only the chunks the instances hold. The instances behind it are listed under ``instances``,
and joined or taken out at run time with ``POST /add_worker?url=`` and ``POST /remove_worker?url=``
(the form a trainer's engines use to register themselves)."""

from __future__ import annotations

import logging

import httpx
from fastapi import APIRouter, Query, Request
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
    """The address, checked as the instance client will use it (httpx's own parse, with IDNA)."""
    url = url.strip()
    try:
        parsed = httpx.URL(url)
        ok = parsed.scheme in ("http", "https") and bool(parsed.host)
    except (httpx.InvalidURL, ValueError, UnicodeError):
        ok = False
    if not ok:
        raise APIError(f"url must be an SGLang server's http(s) address, got {url!r}", param="url")
    return url.rstrip("/")


@router.get("/list_workers")
async def list_workers(request: Request):
    return {"urls": [_own_url(request)]}


@router.get("/workers")
async def workers(request: Request):
    fe = frontend(request)
    worker = {"id": "seer_sglang", "url": _own_url(request), "model_id": fe.model.served_name,
              "worker_type": "regular", "is_healthy": fe.engine.router.healthy_count() > 0,
              "load": fe.engine.buffer.live_samples(), "instances": fe.engine.instances.status()}
    return {"workers": [worker], "total": 1, "stats": {"prefill_count": 0, "decode_count": 0, "regular_count": 1}}


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
    fe = frontend(request)
    url = _worker_url(url)
    known = fe.engine.instances.find(url)
    if known is not None and known.index not in fe.engine.removed:
        return {"status": "already a worker", "url": url, "instance": known.index}
    index = known.index if known is not None else len(fe.engine.instances.clients)
    client = InstanceClient(url, index, **fe.instance_args)
    refusal = await _not_an_instance_of(fe, client)
    if refusal is not None:
        await client.close()
        raise refusal
    await fe.engine.instances.add(client)
    logger.info("worker added: instance %d is %s", index, url)
    return {"status": "added", "url": url, "instance": index}


@router.post("/remove_worker")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def remove_worker(request: Request, url: str = WORKER_URL):
    """Nothing more is sent to the instance; chunks it is running finish there. It keeps running."""
    fe = frontend(request)
    url = _worker_url(url)
    known = fe.engine.instances.find(url)
    if known is None or known.index in fe.engine.removed:
        raise APIError(f"{url} is not a worker of this server", 404, param="url", code="worker_not_found")
    fe.engine.instances.remove(known.index)
    logger.info("worker removed: instance %d (%s)", known.index, url)
    return {"status": "removed", "url": url, "instance": known.index}
