"""Helpers the route modules share."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from ..errors import APIError
from ..state import Frontend


def frontend(request: Request) -> Frontend:
    return request.app.state.frontend


async def json_body(request: Request) -> Any:
    """The body of a route that forwards whatever SGLang accepts; an empty body is ``{}``."""
    raw = await request.body()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as e:
        raise APIError(f"invalid JSON body: {e}") from e


def policy_json(policy) -> dict[str, Any]:
    fields = ("chunk_size", "kv_headroom", "starvation_bound")
    out = {"name": policy.name, **{f: getattr(policy, f) for f in fields if hasattr(policy, f)}}
    if hasattr(policy, "page_size"):
        out["align_to_pages"] = policy.page_size is not None
    return out
