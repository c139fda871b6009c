"""Admin calls a trainer makes between rollouts, fanned out to every instance: abort, pause and
continue, cache flush. The frontend's own state (buffer, pool) changes first. Weight updates and
memory release are in ``weights.py``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sglang.srt.utils.auth import AuthLevel, auth_level

from ..errors import APIError
from ..protocol import AbortRequest
from ..state import Frontend
from .common import frontend, json_body

router = APIRouter()


async def fan_out(fe: Frontend, path: str, body: dict[str, Any] | list[dict[str, Any]] | None, *,
                  control: bool = False, message: str = "Success") -> JSONResponse:
    """The call on every instance (``body``: one for all, or one per instance): 200 if all took it; an
    instance's own refusal (4xx) as it is, so a caller that retries on SGLang's answer retries here;
    502 if an instance failed or did not answer in time (each instance's status is in the answer).

    ``control`` (abort, pause, continue, flush): the short timeout, and an instance marked down, which
    holds nothing to abort, pause or flush, does not fail the call. Any other call (a weight update)
    fails while an instance is down: it would come back on other weights."""
    return answer(await fe.engine.instances.broadcast(path, body, control=control), down_ok=control, message=message)


def answer(per_instance: list[dict[str, Any]], down_ok: bool = False, message: str = "Success") -> JSONResponse:
    """One answer for a call every instance got (``fan_out``), with SGLang's ``success`` and
    ``message`` (the first failing instance's, on failure) and each instance's own answer."""
    counted = [r for r in per_instance if not (down_ok and r.get("skipped"))]
    statuses = [r["status"] for r in counted]
    ok = all(s == 200 for s in statuses)
    refused = [s for s in statuses if 400 <= s < 500]
    status = 200 if ok else (refused[0] if refused and all(s < 500 for s in statuses) else 502)
    if not ok:
        bad = next(r for r in counted if r["status"] != 200)
        said = bad.get("body", {}).get("message") if isinstance(bad.get("body"), dict) else None
        message = f"instance {bad['instance']}: {said or bad.get('error') or bad['status']}"
    return JSONResponse({"success": ok, "message": message, "instances": per_instance}, status_code=status)


@router.post("/abort_request")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def abort_request(req: AbortRequest, request: Request):
    """SGLang's abort: every request (``abort_all``), or the one its rid names exactly: a ``/generate``
    caller's rid, a sample rid (``<group>-<index>``) or a group id (all its samples). A sample's chunk
    is cancelled, which closes its request to the instance, and SGLang aborts it there; ``abort_all``
    is also fanned out to every instance, with the short control timeout, and each one's answer is
    listed (a stuck instance is named, not waited for)."""
    fe = frontend(request)
    if req.abort_all:
        aborted = fe.abort_all()
        response = await fan_out(fe, "/abort_request", req.model_dump(), control=True)
    else:
        if not req.rid:
            raise APIError("give rid (a /generate rid, sample rid or group id) or abort_all=true", param="rid")
        samples = fe.find_samples(req.rid)
        for sample in samples:
            fe.engine.abort_sample(sample)
        aborted = len(samples)
        response = JSONResponse({"success": True, "instances": []})
    response.headers["x-seer-aborted-samples"] = str(aborted)
    return response


@router.post("/pause_generation")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def pause_generation(request: Request):
    """SGLang's pause. ``mode`` "abort" (the default): every instance aborts what it runs, and each
    ``/generate`` sample in flight or queued is answered as an abort with its tokens so far, for the
    caller to resend with them (AReaL's and slime's partial rollout); ``/v1/rollout`` and OpenAI
    samples wait and go on after ``/continue_generation``, losing nothing. "retract" and "in_place":
    the instances keep their requests, as SGLang defines those modes, and nothing new is dispatched.
    New requests wait for ``/continue_generation`` in every mode, as in SGLang."""
    fe = frontend(request)
    body = await json_body(request)
    body = {} if body is None else body
    mode = body.get("mode", "abort") if isinstance(body, dict) else None
    if mode not in ("abort", "retract", "in_place"):
        raise APIError("mode must be one of 'abort', 'retract', 'in_place'", param="mode")
    returned = fe.engine.set_paused(True, returns=mode == "abort")
    response = await fan_out(fe, "/pause_generation", body, control=True, message="Generation paused successfully.")
    response.headers["x-seer-returned-samples"] = str(returned)
    return response


@router.post("/continue_generation")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def continue_generation(request: Request):
    fe = frontend(request)
    fe.engine.set_paused(False)
    return await fan_out(fe, "/continue_generation", await json_body(request), control=True,
                         message="Generation continued successfully.")


@router.api_route("/flush_cache", methods=["GET", "POST"])
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def flush_cache(request: Request):
    """Empty every instance's radix cache and the global KV pool. GET too, as SGLang: slime and veRL
    call it so, and retry until it answers 200 (an instance with requests running refuses, 400)."""
    fe = frontend(request)
    path, wait = "/flush_cache", 0.0
    raw = request.query_params.get("timeout")
    if raw is not None:  # SGLang's: how long an instance waits for its requests to finish first
        try:
            wait = float(raw)
        except ValueError:
            wait = -1.0
        if not 0 <= wait < float("inf"):
            raise APIError("timeout must be a number of seconds >= 0", param="timeout")
        path = f"/flush_cache?timeout={wait}"
    response = await fan_out(fe, path, None, control=wait == 0)
    response.headers["x-seer-pool-pages-cleared"] = str(await fe.pool.clear())
    return response
