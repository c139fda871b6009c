"""ASGI middleware of the frontend: the body-size bound and the request counter.

Plain ASGI rather than Starlette's ``BaseHTTPMiddleware``: the routes read the client's disconnect
from the same ``receive`` channel (``routes/common.py: unless_disconnected``), which a
``BaseHTTPMiddleware`` in between would hide.
"""

from __future__ import annotations

from typing import Any, Callable

from .errors import BodyTooLarge, error_response


class BoundBody:
    """A body over ``max_bytes`` is refused with 413: at once when its ``Content-Length`` says so, and
    as soon as the bytes read pass the bound when it does not (a chunked body), before the route has
    built anything from it."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    def _too_large(self, size: int | str) -> str:
        return f"request body of {size} bytes is over the limit of {self.max_bytes} (--max-body-mb)"

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length", b"").decode("latin-1")
        if length.isdigit() and int(length) > self.max_bytes:
            response = error_response(self._too_large(int(length)), 413, code="request_too_large")
            return await response(scope, receive, send)
        read = 0

        async def bounded_receive() -> dict:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > self.max_bytes:
                    raise BodyTooLarge(self._too_large(f"over {self.max_bytes}"))
            return message

        await self.app(scope, bounded_receive, send)


class CountRequests:
    """``seer_requests_total`` by route and status."""

    def __init__(self, app: Any, count: Callable[[str, str], None]):
        self.app, self.count = app, count

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = {"code": 500}

        async def send_status(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            self.count(getattr(route, "path", "unmatched"), str(status["code"]))
