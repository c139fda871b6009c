"""Async HTTP client for one SGLang instance: generate (plain or streamed), load telemetry, admin calls."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

import httpx

from ..client import bearer
from ..config import ROLLOUT, RolloutConfig


class InstanceUnavailable(RuntimeError):
    """The instance did not answer (connection refused, reset, timeout): retry elsewhere. ``crashed``:
    it closed the connection in the middle of the request, as a process that dies does."""

    def __init__(self, message: str, crashed: bool = False):
        super().__init__(message)
        self.crashed = crashed


def _unavailable(url: str, e: httpx.HTTPError) -> InstanceUnavailable:
    crashed = isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError))
    return InstanceUnavailable(f"{url}: {type(e).__name__}: {e}", crashed=crashed)


class InstanceRejected(RuntimeError):
    """The instance answered with an error about the request itself: do not retry."""

    def __init__(self, message: str, status_code: int = 400):
        super().__init__(message)
        self.status_code = status_code


@dataclass
class InstanceLoad:
    """One telemetry sample from SGLang's ``/v1/loads``."""

    running: int = 0
    waiting: int = 0
    used_tokens: int = 0
    max_total_tokens: int = 0
    token_usage: float = 0.0
    retracted: int = 0
    timestamp: float = 0.0

    @classmethod
    def from_v1_loads(cls, body: dict[str, Any]) -> "InstanceLoad":
        loads = body.get("loads") or [{}]
        agg = cls(timestamp=time.time())
        for d in loads:  # one entry per DP rank
            agg.running += int(d.get("num_running_reqs", 0))
            agg.waiting += int(d.get("num_waiting_reqs", 0))
            agg.used_tokens += int(d.get("num_used_tokens", 0))
            agg.max_total_tokens += int(d.get("max_total_num_tokens", 0))
            agg.retracted += int((d.get("queues") or {}).get("retracted", 0))
        agg.token_usage = agg.used_tokens / agg.max_total_tokens if agg.max_total_tokens else 0.0
        return agg


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        return str(err.get("message", err))
    return str(err)


# SGLang's server closes a connection idle for SGLANG_TIMEOUT_KEEP_ALIVE (5 s). With httpx's default
# expiry (also 5 s) a chunk sent on a connection idle that long races the server's close and fails with
# a ReadError: the chunk is taken for lost and its instance for down. Idle connections are dropped here
# well before the server would.
KEEPALIVE_EXPIRY_S = 2.0


def _timeout(seconds: float, config: RolloutConfig) -> httpx.Timeout:
    """``seconds`` for reading, writing and the pool (0 = no limit), and the connect timeout."""
    return httpx.Timeout(seconds or None, connect=config.connect_timeout_s)


class InstanceClient:
    """``api_key`` goes with every call, ``admin_api_key`` (else ``api_key``) with admin calls: SGLang's
    rules for its normal and admin-optional routes, so instances started with ``--api-key`` answer."""

    def __init__(self, url: str, index: int, config: RolloutConfig = ROLLOUT, *, api_key: str | None = None,
                 admin_api_key: str | None = None):
        self.url = url.rstrip("/")
        self.index = index
        self._admin_headers = bearer(admin_api_key or api_key)
        self._poll_timeout = _timeout(config.poll_timeout_s, config)
        self._info_timeout = _timeout(config.info_timeout_s, config)
        self._admin_timeout = _timeout(config.admin_timeout_s, config)
        self._control_timeout = _timeout(config.control_timeout_s, config)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=KEEPALIVE_EXPIRY_S)
        self._http = httpx.AsyncClient(base_url=self.url, timeout=_timeout(config.chunk_timeout_s, config),
                                       headers=bearer(api_key),
                                       transport=httpx.AsyncHTTPTransport(retries=config.instance_retries,
                                                                          limits=limits))

    def __repr__(self) -> str:
        return f"InstanceClient({self.index}, {self.url})"

    async def close(self) -> None:
        await self._http.aclose()

    async def generate(self, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            r = await self._http.post("/generate", json=payload)
        except httpx.HTTPError as e:
            raise _unavailable(self.url, e) from e
        if r.status_code >= 500:
            raise InstanceUnavailable(f"{self.url}: HTTP {r.status_code}: {_error_message(r)}")
        if r.status_code != 200:
            raise InstanceRejected(_error_message(r), r.status_code)
        return r.json()

    async def generate_stream(self, payload: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Yields SGLang's cumulative stream events; the last one carries ``finish_reason``."""
        payload = {**payload, "stream": True}
        try:
            async with self._http.stream("POST", "/generate", json=payload) as r:
                if r.status_code >= 500:
                    raise InstanceUnavailable(f"{self.url}: HTTP {r.status_code}")
                if r.status_code != 200:
                    await r.aread()
                    raise InstanceRejected(_error_message(r), r.status_code)
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    event = json.loads(data)
                    if "error" in event:
                        err = event["error"]
                        raise InstanceRejected(str(err.get("message", err)), int(err.get("code", 400)))
                    yield event
        except httpx.HTTPError as e:
            raise _unavailable(self.url, e) from e

    async def load(self) -> InstanceLoad:
        try:
            r = await self._http.get("/v1/loads", timeout=self._poll_timeout)
            r.raise_for_status()
        except httpx.HTTPError as e:
            raise InstanceUnavailable(f"{self.url}: {e}") from e
        return InstanceLoad.from_v1_loads(r.json())

    async def healthy(self) -> bool:
        try:
            return (await self._http.get("/health", timeout=self._poll_timeout)).status_code == 200
        except httpx.HTTPError:
            return False

    async def server_info(self) -> dict[str, Any]:
        r = await self._http.get("/server_info", timeout=self._info_timeout)
        r.raise_for_status()
        return r.json()

    async def post_admin(self, path: str, body: dict[str, Any] | None, *, control: bool = False) -> tuple[int, Any]:
        """Forward an admin call; returns (status, body). ``control``: an abort, pause, continue or flush,
        which an instance that answers at all answers at once (``--control-timeout-s``); otherwise a
        weight update or sleep-mode call (``--admin-timeout-s``)."""
        return await self._call("POST", path, json=body or {}, headers=self._admin_headers,
                                timeout=self._control_timeout if control else self._admin_timeout)

    async def get(self, path: str, params: dict[str, Any] | None = None) -> tuple[int, Any]:
        """Forward a read-only call (server and model info, loads, health); returns (status, body)."""
        return await self._call("GET", path, params=params, timeout=self._info_timeout)

    async def metrics(self) -> str | None:
        """The instance's Prometheus text (SGLang's ``/metrics``, with ``--enable-metrics``), or None."""
        try:
            r = await self._http.get("/metrics", timeout=self._poll_timeout)
        except httpx.HTTPError:
            return None
        return r.text if r.status_code == 200 else None

    async def _call(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        try:
            r = await self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as e:
            return 504, {"error": f"{self.url} did not answer {path} in time ({type(e).__name__})"}
        except httpx.HTTPError as e:
            return 503, {"error": f"{type(e).__name__}: {e}"}
        try:
            content: Any = r.json()
        except ValueError:
            content = r.text
        return r.status_code, content
