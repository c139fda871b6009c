"""An HTTP proxy in front of a real SGLang instance that can be told to answer errors: what the frontend
sees of an instance whose generation fails while its load polls still answer."""

from __future__ import annotations

import threading

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from seer_sglang.launch.instances import free_port
from seer_sglang.launch.waiting import wait_until


class FaultProxy:
    """Forwards everything to ``upstream``; while ``failing`` is set, ``POST /generate`` gets a 500."""

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.failing = False
        self.refused = 0  # /generate calls answered with an error
        self.forwarded = 0  # /generate calls passed on
        app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        wait_until(lambda: self._server.started, 30, 0.05, "the proxy started")
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    async def _handle(self, request: Request) -> Response:
        path = request.url.path
        if path == "/generate":
            if self.failing:
                self.refused += 1
                return JSONResponse({"error": {"message": "injected failure"}}, status_code=500)
            self.forwarded += 1
        body = await request.body()
        client = httpx.AsyncClient(base_url=self.upstream, timeout=None)
        upstream = await client.send(client.build_request(request.method, path, params=request.query_params,
                                                          content=body,
                                                          headers={"content-type": "application/json"}),
                                     stream=True)

        async def relay():
            try:
                async for part in upstream.aiter_raw():
                    yield part
            finally:
                await upstream.aclose()
                await client.aclose()

        headers = {k: v for k, v in upstream.headers.items() if k.lower() in ("content-type",)}
        return StreamingResponse(relay(), status_code=upstream.status_code, headers=headers)
