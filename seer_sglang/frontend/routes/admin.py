"""Admin calls a trainer makes between rollouts, fanned out to every instance: abort, pause and
continue, cache flush, weight update. The frontend's own state (buffer, pool) changes first."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..errors import APIError
from ..protocol import AbortRequest
from ..state import Frontend
from .common import frontend, json_body

router = APIRouter()


async def fan_out(fe: Frontend, path: str, body: dict[str, Any] | None) -> JSONResponse:
    per_instance = await fe.engine.broadcast(path, body)
    ok = all(r["status"] == 200 for r in per_instance)
    return JSONResponse({"success": ok, "instances": per_instance}, status_code=200 if ok else 502)


@router.post("/abort_request")
async def abort_request(req: AbortRequest, request: Request):
    fe = frontend(request)
    if req.abort_all:
        aborted = fe.engine.abort_all()
    else:
        if not req.rid:
            raise APIError("give rid (a group id, sample rid or SGLang rid) or abort_all=true", param="rid")
        samples = fe.find_samples(req.rid)
        for sample in samples:
            fe.engine.abort_sample(sample)
        aborted = len(samples)
    response = await fan_out(fe, "/abort_request", req.model_dump())
    response.headers["x-seer-aborted-samples"] = str(aborted)
    return response


@router.post("/pause_generation")
async def pause_generation(request: Request):
    fe = frontend(request)
    fe.engine.set_paused(True)
    return await fan_out(fe, "/pause_generation", await json_body(request))


@router.post("/continue_generation")
async def continue_generation(request: Request):
    fe = frontend(request)
    fe.engine.set_paused(False)
    return await fan_out(fe, "/continue_generation", await json_body(request))


@router.post("/flush_cache")
async def flush_cache(request: Request):
    """Empty every instance's radix cache and the global KV pool (between benchmark modes)."""
    fe = frontend(request)
    response = await fan_out(fe, "/flush_cache", None)
    response.headers["x-seer-pool-pages-cleared"] = str(await fe.pool.clear())
    return response


@router.post("/update_weights_from_disk")
async def update_weights_from_disk(request: Request):
    fe = frontend(request)
    body = await json_body(request)
    if not isinstance(body, dict) or not body.get("model_path"):
        raise APIError("model_path is required", param="model_path")
    # Every update gets a version name, so samples can tell which weights made them.
    body.setdefault("weight_version", f"update-{uuid.uuid4().hex[:12]}")
    # KV pages are keyed by weight version (plugin/weight_namespace.py): old ones can never be matched
    # again, and age out of the caches. SGLang's own flush fails while a rollout's chunks are queued.
    body.setdefault("flush_cache", False)
    response = await fan_out(fe, "/update_weights_from_disk", body)
    # The pool's pages are keyed by the old version now, so none can be loaded again: drop them.
    await fe.pool.clear()
    response.headers["x-seer-weight-version"] = str(body["weight_version"])
    return response
