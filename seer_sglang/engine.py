"""``seer_sglang.Engine``: seer in the caller's process, as ``sglang.Engine`` is SGLang in it.

    import seer_sglang
    engine = seer_sglang.Engine(model_path="tiny", num_instances=2, dtype="float32")
    out = engine.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 16})   # SGLang's answer
    result = engine.rollout(["What is 2+3?"], n=8, max_tokens=256)                        # seer's rollout
    engine.shutdown()

The SGLang instances (and the KV pool and the draft server) are started as ``launch_server`` starts
them; the frontend (the router and its scheduler) runs on an event loop in a thread of this process and
is called without a port, through its ASGI app: the calls are the HTTP API's, so the two behave alike.
Keyword arguments are Seer's flags or SGLang's (``dtype="float32"`` is ``--dtype float32``).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Sequence

import httpx

from .client import AsyncRolloutClient, Prompt, RolloutResult, bearer


def _argv(kwargs: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for name, value in kwargs.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


class _Keys(httpx.Auth):
    """SGLang's two keys, as a client holding both must send them: with both set, ordinary routes take
    only the API key and admin routes only the admin key. The API key goes first; a call an admin
    route refused (401) goes again with the admin key."""

    requires_request_body = True

    def __init__(self, api_key: str | None, admin_api_key: str | None):
        self.api_key, self.admin_api_key = api_key, admin_api_key

    def auth_flow(self, request):
        first = self.api_key or self.admin_api_key
        request.headers.update(bearer(first))
        response = yield request
        if response.status_code == 401 and self.admin_api_key and first != self.admin_api_key:
            request.headers.update(bearer(self.admin_api_key))
            yield request


class Engine:
    def __init__(self, model_path: str | None = None, **kwargs: Any):
        from .config import from_namespace
        from .frontend.app import create_app
        from .launch.supervisor import for_deployment
        from .launch import deployment
        from .launch_server import seer_parser

        ns, sglang_args = seer_parser().parse_known_args(_argv({"model_path": model_path, **kwargs}))
        self._deployment = deployment.start(from_namespace(ns), sglang_args)
        dep = self._deployment
        self._app = create_app(dep.urls, dep.config, model_path=dep.model_path, pool=dep.pool_access(),
                               supervisor=for_deployment(dep))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="seer-engine", daemon=True)
        self._thread.start()
        self._lifespan = self._app.router.lifespan_context(self._app)
        try:
            self._call(self._lifespan.__aenter__())
        except BaseException:
            self._stop_loop()
            dep.stop()
            raise
        keys = dep.config.frontend
        transport = httpx.ASGITransport(app=self._app)
        self._http = httpx.AsyncClient(transport=transport, base_url="http://seer-engine", timeout=None,
                                       auth=_Keys(keys.api_key, keys.admin_api_key))
        self._client = AsyncRolloutClient(http=self._http)

    # ---- plumbing --------------------------------------------------------------------------
    def _call(self, coro):
        """Run a coroutine on the engine's loop from any thread; its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _on_loop(self, coro):
        """Await, from the caller's own loop, a coroutine that runs on the engine's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    @staticmethod
    def _body(prompt, sampling_params, input_ids, return_logprob, logprob_start_len, top_logprobs_num,
              rid, extra) -> dict[str, Any]:
        body = {"text": prompt, "input_ids": input_ids, "sampling_params": sampling_params,
                "return_logprob": return_logprob, "logprob_start_len": logprob_start_len,
                "top_logprobs_num": top_logprobs_num, "rid": rid, **extra}
        return {k: v for k, v in body.items() if v is not None}

    # ---- SGLang's Engine API ---------------------------------------------------------------
    def generate(self, prompt: str | list[str] | None = None, sampling_params: dict | list | None = None,
                 input_ids: list[int] | list[list[int]] | None = None, return_logprob: bool | None = None,
                 logprob_start_len: int | None = None, top_logprobs_num: int | None = None,
                 rid: str | list[str] | None = None, **extra: Any) -> dict | list:
        """As ``sglang.Engine.generate`` (no streaming): SGLang's answer, one dict or a list."""
        body = self._body(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                          top_logprobs_num, rid, extra)
        return self._call(self._client.generate(body))

    async def async_generate(self, prompt: str | list[str] | None = None, sampling_params: dict | list | None = None,
                             input_ids: list[int] | list[list[int]] | None = None,
                             return_logprob: bool | None = None, logprob_start_len: int | None = None,
                             top_logprobs_num: int | None = None, rid: str | list[str] | None = None,
                             **extra: Any) -> dict | list:
        """As ``sglang.Engine.async_generate``; concurrent calls with the same prompt form one group."""
        body = self._body(prompt, sampling_params, input_ids, return_logprob, logprob_start_len,
                          top_logprobs_num, rid, extra)
        return await self._on_loop(self._client.generate(body))

    def rollout(self, prompts: Sequence[Prompt], n: int = 1, **sampling: Any) -> RolloutResult:
        """seer's batch rollout (``POST /v1/rollout``): n samples of every prompt."""
        return self._call(self._client.rollout(prompts, n, **sampling))

    async def async_rollout(self, prompts: Sequence[Prompt], n: int = 1, **sampling: Any) -> RolloutResult:
        return await self._on_loop(self._client.rollout(prompts, n, **sampling))

    def update_weights_from_disk(self, model_path: str, **kwargs: Any) -> dict[str, Any]:
        return self._call(self._client.update_weights_from_disk(model_path, **kwargs))

    def flush_cache(self) -> dict[str, Any]:
        return self._call(self._client.flush_cache())

    def abort_request(self, rid: str = "", abort_all: bool = False) -> dict[str, Any]:
        return self._call(self._client.abort(rid, abort_all))

    def get_server_info(self) -> dict[str, Any]:
        return self._call(self._client.get("/server_info"))

    # ---- lifecycle -------------------------------------------------------------------------
    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def shutdown(self) -> None:
        """Stop the frontend and every process the engine started."""
        if self._deployment is None:
            return
        try:
            self._call(self._http.aclose())
            self._call(self._lifespan.__aexit__(None, None, None))
        finally:
            self._stop_loop()
            self._deployment.stop()
            self._deployment = None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __del__(self) -> None:
        if getattr(self, "_deployment", None) is not None:
            try:
                self.shutdown()
            except Exception:
                pass
