"""SGLang's discovery and health routes, answered for the whole deployment, so a trainer that checks
the server the way it checks SGLang finds what it looks for: ``/server_info`` and ``/model_info`` (and
their old ``/get_`` names), ``/health_generate``, ``/v1/loads`` and ``/get_weight_version``."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sglang.srt.utils.auth import AuthLevel, auth_level

from ...wire import SEEDED_SAMPLER
from ..errors import APIError
from .common import frontend, policy_json

router = APIRouter()


async def _first_answer(request: Request, path: str) -> dict[str, Any]:
    """The answer of the first instance that gives one (every instance runs the same model and flags)."""
    fe = frontend(request)
    for client in fe.engine.instances.active():
        if fe.engine.views[client.index].healthy:
            status, body = await client.get(path)
            if status == 200 and isinstance(body, dict):
                return body
    raise APIError("no healthy SGLang instance is available", 503, type_="server_error",
                   code="no_healthy_instance")


REDACTED = "<redacted>"


def redact(value: Any, secrets: set[str]) -> Any:
    """``value`` with every field named like a key emptied and every string that holds one of
    ``secrets`` (the keys themselves) redacted, at any depth: SGLang's server info carries its
    ``api_key`` and ``admin_api_key`` flags, and its launch command could spell them out."""
    if isinstance(value, dict):
        return {k: (None if v is not None and _secret_name(k) else redact(v, secrets)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    if isinstance(value, str) and any(s in value for s in secrets):
        for s in secrets:
            value = value.replace(s, REDACTED)
    return value


def _secret_name(key: Any) -> bool:
    name = str(key).lower()
    return name.endswith("api_key") or any(w in name for w in ("secret", "password", "credential"))


@router.get("/server_info")
@router.get("/get_server_info")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def server_info(request: Request):
    """An instance's server info (its flags: tp_size, dp_size...), with seer's own section. It tells
    the deployment's configuration, so it takes the admin key when one is set, and it never carries a
    key: every key-like field is emptied."""
    fe = frontend(request)
    secrets = {k for k in (fe.instance_args.get("api_key"), fe.instance_args.get("admin_api_key")) if k}
    info = redact(await _first_answer(request, "/server_info"), secrets)
    # the GPUs behind this one server: a trainer sizes its weight-sync group from them (slime reads
    # num_gpus, else tp_size x pp_size, which are one instance's)
    info["num_gpus"] = len(fe.engine.instances.active()) * int(info.get("tp_size") or 1) * int(info.get("pp_size") or 1)
    info["seer"] = {"num_instances": len(fe.engine.instances.active()),
                    # ranks a weight update addresses (routes/weights.py): K instances x TP each
                    "weight_update_ranks": len(fe.engine.instances.active()) * fe.model.tp_size,
                    "memory_released": fe.engine.instances.memory_released,
                    "instances": fe.engine.instances.status(),
                    "scheduler": policy_json(fe.engine.policy),
                    "group_window_ms": fe.grouper.window_s * 1000,
                    "mixed_weight_versions": fe.engine.mixed_weight_versions,
                    # each instance's SLO report (step-time fit, credit-batching counters), once SLO traffic came
                    "slo": {str(i): r for i, r in sorted(fe.engine.instances.slo_reports.items())},
                    "sampling": sampling_guarantee(info.get("sampling_backend"))}
    return info


def sampling_guarantee(backend: str | None) -> dict[str, Any]:
    """Which promise the instances' sampler keeps: only the seeded one draws a sample's tokens the
    same however it is chunked or moved (and reproduces a request seed)."""
    seeded = backend == SEEDED_SAMPLER
    return {"backend": backend, "seeded": seeded,
            "guarantee": ("chunked and migrated samples draw exactly the tokens of an unchunked run; "
                          "a request seed reproduces the rollout") if seeded else
                         ("samples follow the model's distribution, but chunking or migration changes "
                          "which tokens are drawn, and a request seed does not reproduce a rollout")}


@router.get("/model_info")
@router.get("/get_model_info")
async def model_info(request: Request):
    return await _first_answer(request, "/model_info")


@router.get("/get_weight_version")
async def weight_version(request: Request):
    """The weight version every instance runs (``null`` while they differ), and each one's."""
    fe = frontend(request)
    answers = await fe.engine.instances.broadcast("/model_info", None, method="GET")
    versions = [a["body"].get("weight_version") if a["status"] == 200 and isinstance(a["body"], dict) else None
                for a in answers]
    agreed = versions[0] if versions and all(v == versions[0] for v in versions) else None
    return {"weight_version": agreed,
            "instances": [{"instance": a["instance"], "weight_version": v} for a, v in zip(answers, versions)]}


# SGLang's own rule: an instance that answered within its health check's timeout is generating.
GENERATING_WITHIN_S = 20.0


@router.get("/health_generate")
async def health_generate(request: Request):
    """200 when at least one instance can generate a token. As in SGLang, a server that is generating
    is healthy without another request: an instance that answered a chunk in the last 20 s counts at
    once, and only the others are asked (SGLang's own check, on each). A 503 says why, per instance."""
    engine = frontend(request).engine
    now = time.monotonic()
    if any(now - t < GENERATING_WITHIN_S and engine.views[i].healthy for i, t in engine.instances.last_answer_at.items()):
        return Response(status_code=200)
    answers = await engine.instances.broadcast("/health_generate", None, method="GET")
    if any(a["status"] == 200 for a in answers):
        return Response(status_code=200)
    return JSONResponse({"error": {"message": "no SGLang instance generated a token", "type": "server_error",
                                   "code": "no_healthy_instance"},
                         "instances": [{k: a[k] for k in ("instance", "url", "status")} for a in answers]},
                        status_code=503)


@router.get("/v1/loads")
async def loads(request: Request):
    """Every instance's ``/v1/loads`` entries, each with its instance, and the frontend's own queue: a
    trainer that waits for an idle server after an abort waits for both."""
    fe = frontend(request)
    answers = await fe.engine.instances.broadcast("/v1/loads", None, method="GET", params=dict(request.query_params))
    entries = []
    for a in answers:
        if a["status"] != 200 or not isinstance(a["body"], dict):
            continue
        for entry in a["body"].get("loads") or []:
            entries.append({**entry, "instance": a["instance"]})
    pending = len(fe.engine.buffer.pending())
    body = {"loads": entries, "num_instances": len(answers),
            "seer": {"pending_samples": pending, "waiting_for_group": len(fe.grouper.waiting())}}
    failed = [a for a in answers if a["status"] != 200]
    return JSONResponse(body, status_code=200 if len(failed) < len(answers) else 503)
