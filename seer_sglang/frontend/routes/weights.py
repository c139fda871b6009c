"""Weight sync and sleep mode, as trainers call SGLang, over K instances of ``tp_size`` GPUs each.

The trainer sees one server with ``K x tp_size`` receiving ranks (``/server_info``'s
``seer.weight_update_ranks``), in instance order:
- ``/update_weights_from_tensor``: one serialized entry per rank; instance i gets entries
  ``[i*tp, (i+1)*tp)``, the handles of its own GPUs. One instance's worth (``tp`` entries) goes to every
  instance alike, which is right for tensors in host shared memory.
- ``/init_weights_update_group``: instance i joins at ``rank_offset + i*tp``.
- ``/update_weights_from_distributed`` and ``/destroy_weights_update_group``: the same body to all.
Every update is given a weight version name when the trainer sends none, so samples can tell which
weights made them; the global KV pool's pages of earlier weights are dropped.
"""

from __future__ import annotations

import uuid
from urllib.parse import quote
from typing import Any

from fastapi import APIRouter, Request
from sglang.srt.utils.auth import AuthLevel, auth_level

from ..errors import APIError
from ..payloads import tensor_entries_problem, update_body_problem
from ..state import Frontend
from .admin import answer, fan_out
from .common import frontend, json_body

router = APIRouter()


async def _object_body(request: Request) -> dict[str, Any]:
    body = await json_body(request)
    if not isinstance(body, dict):
        raise APIError("the body must be a JSON object")
    return body


async def _custom_loaders(fe: Frontend) -> list[str]:
    """The instances' ``--custom-weight-loader`` functions (a tensor update's ``load_format`` may name one)."""
    answers = await fe.engine.instances.broadcast("/server_info", None, method="GET")
    info = next((a["body"] for a in answers if a["status"] == 200 and isinstance(a["body"], dict)), {})
    return list(info.get("custom_weight_loader") or [])


async def _update(fe: Frontend, path: str, bodies: dict[str, Any] | list[dict[str, Any]], *,
                  session: bool = False):
    """A weight update on every instance, under one version name; the pool's old pages are dropped.

    ``session``: SGLang loads tensor and distributed updates only inside a weight-update session
    (``/begin_weight_update`` ... ``/end_weight_update``). A trainer that opened none, as trainers written
    for earlier SGLang do not, gets one around this update."""
    listed = bodies if isinstance(bodies, list) else [bodies]
    for body in listed:
        fmt = body.get("load_format")
        loaders = (await _custom_loaders(fe)) if fmt not in (None, "direct", "flattened_bucket") else []
        problem = update_body_problem(path, body, loaders)
        if problem is not None:
            raise APIError(problem[1], param=problem[0])
    if any(body.get("abort_all_requests") for body in listed):
        fe.abort_all()  # as SGLang: every request, the samples waiting here included, not only the chunks
    version = f"update-{uuid.uuid4().hex[:12]}"
    for body in listed:
        version = body.setdefault("weight_version", version)
        # KV pages are keyed by weight version (plugin/weight_namespace.py): old ones are never matched
        # again. SGLang's own flush fails while a rollout's chunks are queued.
        body.setdefault("flush_cache", False)
    wrap = session and not fe.weight_session_open
    if wrap:
        opened = await fan_out(fe, "/begin_weight_update", {})
        if opened.status_code != 200:
            return opened
    try:
        response = await fan_out(fe, path, bodies)
    finally:
        if wrap:
            await fan_out(fe, "/end_weight_update", {})
    await fe.pool.clear()
    if response.status_code == 200:  # what an instance restarted later must load again
        fe.last_update = (path, dict(bodies[0] if isinstance(bodies, list) else bodies))
    response.headers["x-seer-weight-version"] = quote(str(version), safe="")  # any name fits a header
    return response


@router.post("/begin_weight_update")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def begin_weight_update(request: Request):
    fe = frontend(request)
    response = await fan_out(fe, "/begin_weight_update", await _object_body(request))
    fe.weight_session_open = response.status_code == 200
    return response


@router.post("/end_weight_update")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def end_weight_update(request: Request):
    fe = frontend(request)
    fe.weight_session_open = False
    return await fan_out(fe, "/end_weight_update", await _object_body(request))


@router.post("/update_weights_from_disk")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def update_weights_from_disk(request: Request):
    body = await _object_body(request)
    if not body.get("model_path"):
        raise APIError("model_path is required", param="model_path")
    return await _update(frontend(request), "/update_weights_from_disk", body)


@router.post("/update_weights_from_tensor")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def update_weights_from_tensor(request: Request):
    fe = frontend(request)
    body = await _object_body(request)
    entries = body.get("serialized_named_tensors")
    if not isinstance(entries, list) or not entries:
        raise APIError("serialized_named_tensors must be a list with one entry per receiving rank",
                       param="serialized_named_tensors")
    k, tp = len(fe.engine.instances.active()), fe.model.tp_size
    if len(entries) == k * tp:
        bodies = [{**body, "serialized_named_tensors": entries[i * tp:(i + 1) * tp]} for i in range(k)]
    elif len(entries) == tp:
        bodies = [dict(body) for _ in range(k)]
    else:
        raise APIError(f"serialized_named_tensors has {len(entries)} entries; this server has {k * tp} receiving "
                       f"ranks ({k} instance(s) x TP {tp}), or send {tp} for every instance alike",
                       param="serialized_named_tensors")
    problem = tensor_entries_problem(entries, (c.url for c in fe.engine.instances.active()))
    if problem is not None:
        raise APIError(f"serialized_named_tensors: {problem}", param="serialized_named_tensors")
    return await _update(fe, "/update_weights_from_tensor", bodies, session=True)


@router.post("/init_weights_update_group")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def init_weights_update_group(request: Request):
    fe = frontend(request)
    body = await _object_body(request)
    missing = [f for f in ("master_address", "master_port", "rank_offset", "world_size", "group_name")
               if f not in body]
    if missing:
        raise APIError(f"{missing[0]} is required", param=missing[0])
    k, tp = len(fe.engine.instances.active()), fe.model.tp_size
    offset, world = int(body["rank_offset"]), int(body["world_size"])
    if offset < 1 or offset + k * tp > world:
        raise APIError(f"ranks {offset}..{offset + k * tp - 1} of this server's {k * tp} receivers do not fit in "
                       f"world_size {world} (rank 0 is the trainer's)", param="rank_offset")
    bodies = [{**body, "rank_offset": offset + i * tp} for i in range(k)]
    return await fan_out(fe, "/init_weights_update_group", bodies)


@router.post("/update_weights_from_distributed")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def update_weights_from_distributed(request: Request):
    body = await _object_body(request)
    for name in ("names", "dtypes", "shapes"):
        if not isinstance(body.get(name), list):
            raise APIError(f"{name} is required (a list)", param=name)
    return await _update(frontend(request), "/update_weights_from_distributed", body, session=True)


@router.post("/destroy_weights_update_group")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def destroy_weights_update_group(request: Request):
    return await fan_out(frontend(request), "/destroy_weights_update_group", await _object_body(request))


def _memory_tags(body: dict) -> set[str]:
    """The tags a release or resume names; SGLang reads none as all of them."""
    from sglang.srt.constants import GPU_MEMORY_ALL_TYPES

    tags = body.get("tags")
    if tags is not None and (not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)):
        raise APIError("tags must be a list of SGLang memory tags", param="tags")
    unknown = sorted(set(tags or []) - set(GPU_MEMORY_ALL_TYPES))
    if unknown:
        raise APIError(f"unknown memory tag {unknown[0]!r}; SGLang's are {GPU_MEMORY_ALL_TYPES}", param="tags")
    return set(tags or GPU_MEMORY_ALL_TYPES)


@router.api_route("/release_memory_occupation", methods=["GET", "POST"])
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def release_memory_occupation(request: Request):
    """Sleep mode for colocated training: every instance gives its memory back (SGLang's ``tags``).
    Nothing is dispatched until the KV cache is resumed; samples in flight wait, they are not lost.
    Releasing what an instance already released is refused (409), as is resuming what it did not:
    SGLang's scheduler fails on either and takes the instance down."""
    fe = frontend(request)
    body = await _object_body(request)
    tags = _memory_tags(body)
    clients = fe.engine.instances.active()
    again = sorted(set().union(*(tags & fe.engine.instances.released_memory[c.index] for c in clients)))
    if again:
        raise APIError(f"memory {again} is already released; resume it first", 409, param="tags",
                       code="already_released")
    if any(v.inflight for v in fe.engine.views):
        raise APIError("chunks are running; pause generation (POST /pause_generation) or let the rollout "
                       "finish before releasing memory", 409, code="not_idle")
    for c in clients:  # before the call: nothing may be dispatched while the instances release
        fe.engine.instances.mark_memory(c.index, tags, released=True)
    per_instance = await fe.engine.instances.broadcast("/release_memory_occupation", {**body, "tags": sorted(tags)})
    for r in per_instance:
        if r["status"] != 200:
            fe.engine.instances.mark_memory(r["instance"], tags, released=False)
    return answer(per_instance)


@router.api_route("/resume_memory_occupation", methods=["GET", "POST"])
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def resume_memory_occupation(request: Request):
    """Without ``tags``, each instance resumes what it released."""
    fe = frontend(request)
    body = await _object_body(request)
    clients = fe.engine.instances.active()
    asked = _memory_tags(body) if body.get("tags") else None
    per_tags = [asked if asked is not None else set(fe.engine.instances.released_memory[c.index]) for c in clients]
    missing = sorted(set().union(*(t - fe.engine.instances.released_memory[c.index] for c, t in zip(clients, per_tags))))
    if missing or not any(per_tags):
        raise APIError(f"memory {missing or 'of no kind'} is not released; nothing to resume", 409, param="tags",
                       code="not_released")
    per_instance = await fe.engine.instances.broadcast("/resume_memory_occupation",
                                             [{**body, "tags": sorted(t)} for t in per_tags])
    for r, t in zip(per_instance, per_tags):
        if r["status"] == 200:
            fe.engine.instances.mark_memory(r["instance"], t, released=False)
    return answer(per_instance)
