"""SGLang's LoRA adapter calls, fanned out to every instance: a sample may continue on any of them, so
each holds the same adapters under the same names.

Loading or unloading an adapter changes what its samples sample, as a weight update does: the
frontend counts each change per adapter, and a sample whose chunks ran under two versions of its
adapter is generated again from its prompt (``RolloutEngine._adapter_agrees``). SGLang unloads an
adapter only once the requests running under it end, so one chunk never spans two versions. A trainer
that swaps an adapter's weights (unload, then load under the same name) pauses generation first, as
with plain SGLang, where a request naming an unloaded adapter is refused.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sglang.srt.utils.auth import AuthLevel, auth_level

from ..errors import APIError
from ..payloads import tensor_entries_problem
from ..state import Frontend
from .admin import answer
from .common import frontend, json_body

router = APIRouter()


def _name(body: Any, *more: str) -> str:
    if not isinstance(body, dict):
        raise APIError("the body must be a JSON object")
    for field in ("lora_name", *more):
        value = body.get(field)
        if not isinstance(value, str) or not value.strip():
            raise APIError(f"{field} must be a non-empty string", param=field)
    if ":" in body["lora_name"]:
        raise APIError("lora_name must not contain ':' (requests name an adapter as <model>:<adapter>)",
                       param="lora_name")
    if not isinstance(body.get("pinned", False), bool):
        raise APIError("pinned must be a boolean", param="pinned")
    return body["lora_name"]


def _tensors(fe: Frontend, body: dict[str, Any]) -> None:
    """SGLang's tensors form: the adapter's config and one serialized entry per TP rank (every instance
    takes the same), each checked as a weight update's are before any instance unpickles it."""
    if not isinstance(body.get("config_dict"), dict):
        raise APIError("config_dict must be the adapter's PEFT config, an object", param="config_dict")
    entries, tp = body.get("serialized_named_tensors"), fe.model.tp_size
    if not isinstance(entries, list) or len(entries) != tp:
        raise APIError(f"serialized_named_tensors must be a list of {tp} entries, one per TP rank of an instance",
                       param="serialized_named_tensors")
    problem = tensor_entries_problem(entries, (c.url for c in fe.engine.instances.active()))
    if problem is not None:
        raise APIError(f"serialized_named_tensors: {problem}", param="serialized_named_tensors")


async def _on_every_instance(request: Request, path: str, *fields: str):
    """The adapter call on every instance; the adapter's version counts one more change whatever the
    answer (an instance may have changed before another refused)."""
    fe = frontend(request)
    fe.check_lora_enabled()
    body = await json_body(request)
    name = _name(body, *fields)
    if path == "/load_lora_adapter_from_tensors":
        _tensors(fe, body)
    per_instance = await fe.engine.instances.broadcast(path, body)
    fe.engine.adapter_versions[name] = fe.engine.adapter_versions.get(name, 0) + 1
    return fe, name, body, per_instance


@router.post("/load_lora_adapter")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def load_lora_adapter(request: Request):
    """SGLang's ``/load_lora_adapter`` on every instance; instances restarted or registered later load
    it too."""
    fe, name, body, per_instance = await _on_every_instance(request, "/load_lora_adapter", "lora_path")
    response = answer(per_instance)
    if response.status_code == 200:
        fe.adapters[name] = ("/load_lora_adapter", dict(body))
    return response


@router.post("/load_lora_adapter_from_tensors")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def load_lora_adapter_from_tensors(request: Request):
    """SGLang's ``/load_lora_adapter_from_tensors`` on every instance (a trainer that holds its adapter
    in memory). An instance restarted later is sent the same tensors; where their shared memory is gone
    by then, it stays held out until the adapter is loaded again."""
    fe, name, body, per_instance = await _on_every_instance(request, "/load_lora_adapter_from_tensors")
    response = answer(per_instance)
    if response.status_code == 200:
        fe.adapters[name] = ("/load_lora_adapter_from_tensors", dict(body))
    return response


@router.post("/unload_lora_adapter")
@auth_level(AuthLevel.ADMIN_OPTIONAL)
async def unload_lora_adapter(request: Request):
    """SGLang's ``/unload_lora_adapter`` on every instance; one that does not hold the adapter counts
    as done: SGLang loads an unloaded adapter again for a request that names it, on the instance that
    got the request only."""
    fe, name, _, per_instance = await _on_every_instance(request, "/unload_lora_adapter")
    for entry in per_instance:
        if 400 <= entry["status"] < 500 and "does not exist" in str(entry.get("body")):
            entry.update(status=200, absent=True)
    fe.adapters.pop(name, None)
    return answer(per_instance)
