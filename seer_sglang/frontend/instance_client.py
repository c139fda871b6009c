"""Async HTTP client for one SGLang instance: generate (plain or streamed), load telemetry, admin calls.

aiohttp rather than httpx: a chunk's call is on the path of every request an agent loop waits for,
and aiohttp's client costs a fraction of a millisecond per call where httpx's costs one or two.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator

import aiohttp
import orjson

from ..client import bearer
from ..config import ROLLOUT, RolloutConfig
from ..wire import json_bytes


class InstanceUnavailable(RuntimeError):
    """The instance did not answer (connection refused, reset, timeout): retry elsewhere. ``crashed``:
    it closed the connection in the middle of the request, as a process that dies does."""

    def __init__(self, message: str, crashed: bool = False):
        super().__init__(message)
        self.crashed = crashed


def _unavailable(url: str, e: BaseException) -> InstanceUnavailable:
    # A refused or failed connection sent nothing; a connection closed or reset once the request was
    # on its way is what a dying process does.
    crashed = not isinstance(e, aiohttp.ClientConnectorError) and isinstance(
        e, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError))
    return InstanceUnavailable(f"{url}: {type(e).__name__}: {e}", crashed=crashed)


# What a call to an instance can fail with besides an HTTP status: the connection (aiohttp's errors)
# or a timeout (asyncio's).
CALL_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


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


def _error_message(status: int, raw: bytes) -> str:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:500].decode("utf-8", "replace") or f"HTTP {status}"
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict):
        return str(err.get("message", err))
    return str(err)


# SGLang's server closes a connection idle for SGLANG_TIMEOUT_KEEP_ALIVE (5 s). A chunk sent on a
# connection idle that long races the server's close and fails: the chunk is taken for lost and its
# instance for down. Idle connections are dropped here well before the server would.
KEEPALIVE_EXPIRY_S = 2.0


def _timeout(seconds: float, config: RolloutConfig) -> aiohttp.ClientTimeout:
    """``seconds`` between the bytes of an answer (0 = no limit), and the connect timeout."""
    return aiohttp.ClientTimeout(total=None, sock_read=seconds or None, connect=config.connect_timeout_s)


class InstanceClient:
    """``api_key`` goes with every call, ``admin_api_key`` (else ``api_key``) with admin calls: SGLang's
    rules for its normal and admin-optional routes, so instances started with ``--api-key`` answer."""

    def __init__(self, url: str, index: int, config: RolloutConfig = ROLLOUT, *, api_key: str | None = None,
                 admin_api_key: str | None = None):
        self.url = url.rstrip("/")
        self.index = index
        self._headers = {"Content-Type": "application/json", **bearer(api_key)}
        self._admin_headers = {"Content-Type": "application/json", **bearer(admin_api_key or api_key)}
        self._chunk_timeout = _timeout(config.chunk_timeout_s, config)
        self._poll_timeout = _timeout(config.poll_timeout_s, config)
        self._info_timeout = _timeout(config.info_timeout_s, config)
        self._admin_timeout = _timeout(config.admin_timeout_s, config)
        self._control_timeout = _timeout(config.control_timeout_s, config)
        self._retries = config.instance_retries
        self._session: aiohttp.ClientSession | None = None  # made in the event loop that uses it

    def __repr__(self) -> str:
        return f"InstanceClient({self.index}, {self.url})"

    @property
    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_EXPIRY_S)
            self._session = aiohttp.ClientSession(self.url, connector=connector)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _request(self, method: str, path: str, *, body: Any = None, headers: dict[str, str] | None = None,
                       timeout: aiohttp.ClientTimeout, params: dict[str, Any] | None = None):
        """The call, its connection retried (``--instance-retries``) while nothing was sent."""
        data = None if body is None else json_bytes(body)
        for attempt in range(self._retries + 1):
            try:
                return await self._http.request(method, path, data=data, headers=headers or self._headers,
                                                timeout=timeout, params=params)
            except aiohttp.ClientConnectorError:
                if attempt == self._retries:
                    raise

    async def generate(self, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            async with await self._request("POST", "/generate", body=payload, timeout=self._chunk_timeout) as r:
                raw = await r.read()
        except CALL_ERRORS as e:
            raise _unavailable(self.url, e) from e
        if r.status >= 500:
            raise InstanceUnavailable(f"{self.url}: HTTP {r.status}: {_error_message(r.status, raw)}")
        if r.status != 200:
            raise InstanceRejected(_error_message(r.status, raw), r.status)
        return orjson.loads(raw)

    async def generate_stream(self, payload: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Yields SGLang's cumulative stream events; the last one carries ``finish_reason``. Lines are
        joined from the bytes as they come (an event holds every logprob so far: no line-length cap)."""
        payload = {**payload, "stream": True}
        try:
            async with await self._request("POST", "/generate", body=payload, timeout=self._chunk_timeout) as r:
                if r.status >= 500:
                    raise InstanceUnavailable(f"{self.url}: HTTP {r.status}")
                if r.status != 200:
                    raise InstanceRejected(_error_message(r.status, await r.read()), r.status)
                pending = b""
                async for piece in r.content.iter_any():
                    pending += piece
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if not line.startswith(b"data:"):
                            continue
                        data = line[5:].strip()
                        if data == b"[DONE]":
                            return
                        event = orjson.loads(data)
                        if "error" in event:
                            err = event["error"]
                            raise InstanceRejected(str(err.get("message", err)), int(err.get("code", 400)))
                        yield event
        except CALL_ERRORS as e:
            raise _unavailable(self.url, e) from e

    async def load(self) -> InstanceLoad:
        status, body = await self._call("GET", "/v1/loads", timeout=self._poll_timeout)
        if status != 200 or not isinstance(body, dict):
            raise InstanceUnavailable(f"{self.url}: /v1/loads answered {status}: {str(body)[:200]}")
        return InstanceLoad.from_v1_loads(body)

    async def healthy(self) -> bool:
        status, _ = await self._call("GET", "/health", timeout=self._poll_timeout)
        return status == 200

    async def server_info(self) -> dict[str, Any]:
        status, body = await self._call("GET", "/server_info", timeout=self._info_timeout)
        if status != 200 or not isinstance(body, dict):
            raise InstanceUnavailable(f"{self.url}: /server_info answered {status}: {str(body)[:200]}")
        return body

    async def post_admin(self, path: str, body: dict[str, Any] | None, *, control: bool = False) -> tuple[int, Any]:
        """Forward an admin call; returns (status, body). ``control``: an abort, pause, continue or flush,
        which an instance that answers at all answers at once (``--control-timeout-s``); otherwise a
        weight update or sleep-mode call (``--admin-timeout-s``)."""
        return await self._call("POST", path, body=body or {}, headers=self._admin_headers,
                                timeout=self._control_timeout if control else self._admin_timeout)

    async def get(self, path: str, params: dict[str, Any] | None = None) -> tuple[int, Any]:
        """Forward a read-only call (server and model info, loads, health); returns (status, body)."""
        return await self._call("GET", path, params=params, timeout=self._info_timeout)

    async def metrics(self) -> str | None:
        """The instance's Prometheus text (SGLang's ``/metrics``, with ``--enable-metrics``), or None."""
        try:
            async with await self._request("GET", "/metrics", timeout=self._poll_timeout) as r:
                text = await r.text()
        except CALL_ERRORS:
            return None
        return text if r.status == 200 else None

    async def _call(self, method: str, path: str, *, timeout: aiohttp.ClientTimeout, body: Any = None,
                    headers: dict[str, str] | None = None, params: dict[str, Any] | None = None) -> tuple[int, Any]:
        """(status, parsed JSON or text); 504 for an instance that did not answer in time, 503 for one
        that could not be reached."""
        try:
            async with await self._request(method, path, body=body, headers=headers, timeout=timeout,
                                           params=params) as r:
                raw = await r.read()
        except asyncio.TimeoutError as e:
            return 504, {"error": f"{self.url} did not answer {path} in time ({type(e).__name__})"}
        except (aiohttp.ClientError, UnicodeError) as e:  # UnicodeError: a host name IDNA cannot encode
            return 503, {"error": f"{type(e).__name__}: {e}"}
        try:
            content: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            content = raw.decode("utf-8", "replace")
        return r.status, content
