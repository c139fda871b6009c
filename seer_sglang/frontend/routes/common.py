"""Helpers the route modules share."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, TypeVar

from fastapi import Request, Response

from ...wire import json_bytes
from ..errors import APIError, ClientGone
from ..state import Frontend


T = TypeVar("T")


async def _disconnected(request: Request) -> None:
    """Returns once the client has closed the connection (its body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """``work``'s result, unless the client goes away first: then ``work`` is cancelled (the route's
    own cleanup aborts its samples on every instance and in the buffer) and ``ClientGone`` is raised.
    Streamed answers need none of this: Starlette cancels their generator when the client leaves."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise ClientGone()


async def run_groups(fe: Frontend, request: Request, groups: list) -> None:
    """Submit the groups and wait until every sample has ended. A client that goes away cancels the
    wait, and ``wait_group`` then aborts its groups' samples."""
    fe.submit(groups)
    await unless_disconnected(request, asyncio.gather(*(fe.engine.wait_group(g) for g in groups)))


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
    except RecursionError:
        raise APIError("invalid JSON body: nested too deeply") from None


def policy_json(policy) -> dict[str, Any]:
    fields = ("chunk_size", "kv_headroom", "starvation_bound", "spread_ties")
    out = {"name": policy.name, **{f: getattr(policy, f) for f in fields if hasattr(policy, f)}}
    if hasattr(policy, "page_size"):
        out["align_to_pages"] = policy.page_size is not None
    return out


def sse(obj: Any) -> bytes:
    return b"data: " + json_bytes(obj) + b"\n\n"


def json_answer(obj: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    """An answer written as SGLang writes its own (``wire.json_bytes``)."""
    return Response(json_bytes(obj), status_code=status_code, headers=headers, media_type="application/json")


async def hold_until_first_token(queue: asyncio.Queue, samples: int) -> list[tuple[str, Any]]:
    """A streamed SLO request's events up to its first token, or up to every sample's end.

    An SLO request can be refused after it is submitted (the router finds no instance that holds its
    SLO, or an instance's admission refuses it). Holding the stream's start until the first token,
    which the client waits for anyway, lets a request refused outright be answered with the 429 it
    gets without streaming, rather than a 200 whose stream holds only errors. The events taken here
    are replayed first by the stream."""
    events, ended = [], 0
    while ended < samples:
        event = await queue.get()
        events.append(event)
        if event[0] == "tokens":
            break
        ended += 1
    return events
