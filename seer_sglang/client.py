"""A small typed client for the rollout API, for RL trainers: synchronous, and asyncio.

    from seer_sglang.client import RolloutClient
    result = RolloutClient("http://127.0.0.1:30000").rollout(["What is 2+3?"], n=8, max_tokens=512)
    for s in result.samples: s.output_ids, s.logprobs, s.text, s.finish_reason

    from seer_sglang.client import AsyncRolloutClient
    async with AsyncRolloutClient("http://127.0.0.1:30000") as client:
        result = await client.rollout(prompts, n=8, max_tokens=512)
        async for sample in client.stream(prompts, n=8):  # each sample as soon as it finishes
            ...

Both stream the NDJSON response, so a tqdm bar shows samples as they finish. The two share the request
and the parsing; only the transport differs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Sequence, Union

import httpx

from .wire import ChunkJSON, SampleJSON

Prompt = Union[str, list[int], list[dict[str, Any]], dict[str, Any]]


class RolloutError(RuntimeError):
    def __init__(self, status_code: int, message: str):
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.message = message


# The sample schema is the frontend's (``seer_sglang.wire``): one definition for both sides.
Chunk = ChunkJSON
RolloutSample = SampleJSON


@dataclass
class RolloutResult:
    samples: list[RolloutSample]
    summary: dict[str, Any]

    def by_prompt(self) -> list[list[RolloutSample]]:
        """Samples grouped per prompt, in prompt order, each group sorted by sample index."""
        n = 1 + max((s.prompt_index for s in self.samples), default=-1)
        groups: list[list[RolloutSample]] = [[] for _ in range(n)]
        for s in self.samples:
            groups[s.prompt_index].append(s)
        return [sorted(g, key=lambda s: s.index) for g in groups]


def _prompt_json(prompt: Prompt) -> Any:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, dict):
        return prompt
    if prompt and isinstance(prompt[0], dict):
        return {"messages": prompt}
    return {"input_ids": list(prompt)}


class _Rollout:
    """One ``/v1/rollout`` call: its body, and the samples and summary read back from its stream."""

    def __init__(self, prompts: Sequence[Prompt], n: int, sampling: dict[str, Any]):
        self.body = {"prompts": [_prompt_json(p) for p in prompts], "n": n, "stream": True, **sampling}
        self.total = sum((p.get("n") or n) if isinstance(p, dict) else n for p in self.body["prompts"])
        self.samples: list[RolloutSample] = []
        self.summary: dict[str, Any] = {}

    def read(self, line: str) -> RolloutSample | None:
        """Take one NDJSON line; returns the sample it carries, if any."""
        if not line.strip():
            return None
        event = json.loads(line)
        if event.get("type") == "sample":
            sample = RolloutSample.from_json(event)
            self.samples.append(sample)
            return sample
        if event.get("type") == "summary":
            self.summary = event
        return None

    def result(self) -> RolloutResult:
        self.samples.sort(key=lambda s: (s.prompt_index, s.index))
        return RolloutResult(self.samples, self.summary)


def bearer(api_key: str | None) -> dict[str, str]:
    """The header of a server started with SGLang's ``--api-key`` (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class RolloutClient:
    def __init__(self, base_url: str = "http://127.0.0.1:30000", timeout_s: float | None = None,
                 api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(timeout_s, connect=10.0),
                                  headers=bearer(api_key))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "RolloutClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def rollout(self, prompts: Sequence[Prompt], n: int = 1, *, progress: bool = True,
                **sampling: Any) -> RolloutResult:
        """Generate n samples for each prompt (text, token ids, chat messages, or a full prompt dict)."""
        from tqdm import tqdm

        call = _Rollout(prompts, n, sampling)
        with tqdm(total=call.total, desc="rollout", unit="sample", disable=not progress) as bar:
            with self._http.stream("POST", "/v1/rollout", json=call.body) as r:
                if r.status_code != 200:
                    r.read()
                    raise RolloutError(r.status_code, _message(r))
                for line in r.iter_lines():
                    if call.read(line) is not None:
                        bar.update(1)
        return call.result()

    def _post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return _answer(self._http.post(path, json=body or {}))

    def abort(self, rid: str = "", abort_all: bool = False) -> dict[str, Any]:
        return self._post("/abort_request", {"rid": rid, "abort_all": abort_all})

    def pause(self) -> dict[str, Any]:
        return self._post("/pause_generation")

    def resume(self) -> dict[str, Any]:
        return self._post("/continue_generation")

    def flush_cache(self) -> dict[str, Any]:
        return self._post("/flush_cache")

    def update_weights_from_disk(self, model_path: str, **kwargs: Any) -> dict[str, Any]:
        return self._post("/update_weights_from_disk", {"model_path": model_path, **kwargs})

    def health(self) -> bool:
        try:
            return self._http.get("/health").status_code == 200
        except httpx.HTTPError:
            return False


class AsyncRolloutClient:
    """The same API for an asyncio trainer loop; ``stream`` yields each sample as it finishes."""

    def __init__(self, base_url: str = "http://127.0.0.1:30000", timeout_s: float | None = None,
                 api_key: str | None = None, *, http: httpx.AsyncClient | None = None):
        """``http``: a client of one's own (``seer_sglang.Engine`` passes one bound to its app)."""
        self.base_url = base_url.rstrip("/")
        self._http = http or httpx.AsyncClient(base_url=self.base_url,
                                               timeout=httpx.Timeout(timeout_s, connect=10.0),
                                               headers=bearer(api_key))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncRolloutClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def _lines(self, call: _Rollout) -> AsyncIterator[str]:
        async with self._http.stream("POST", "/v1/rollout", json=call.body) as r:
            if r.status_code != 200:
                await r.aread()
                raise RolloutError(r.status_code, _message(r))
            async for line in r.aiter_lines():
                yield line

    async def stream(self, prompts: Sequence[Prompt], n: int = 1, **sampling: Any) -> AsyncIterator[RolloutSample]:
        """Each sample as soon as it finishes. Closing the iterator early (``aclose``, or leaving an
        ``async with contextlib.aclosing(...)`` block) closes the stream, which aborts the rest."""
        call = _Rollout(prompts, n, sampling)
        async for line in self._lines(call):
            sample = call.read(line)
            if sample is not None:
                yield sample

    async def rollout(self, prompts: Sequence[Prompt], n: int = 1, *, progress: bool = False,
                      **sampling: Any) -> RolloutResult:
        """Generate n samples for each prompt, as ``RolloutClient.rollout``."""
        from tqdm import tqdm

        call = _Rollout(prompts, n, sampling)
        with tqdm(total=call.total, desc="rollout", unit="sample", disable=not progress) as bar:
            async for line in self._lines(call):
                if call.read(line) is not None:
                    bar.update(1)
        return call.result()

    async def _post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return _answer(await self._http.post(path, json=body or {}))

    async def generate(self, body: dict[str, Any]) -> dict[str, Any] | list[dict[str, Any]]:
        """SGLang's native ``POST /generate``: its body in, its answer out."""
        return await self._post("/generate", body)

    async def get(self, path: str) -> dict[str, Any]:
        return _answer(await self._http.get(path))

    async def abort(self, rid: str = "", abort_all: bool = False) -> dict[str, Any]:
        return await self._post("/abort_request", {"rid": rid, "abort_all": abort_all})

    async def pause(self) -> dict[str, Any]:
        return await self._post("/pause_generation")

    async def resume(self) -> dict[str, Any]:
        return await self._post("/continue_generation")

    async def flush_cache(self) -> dict[str, Any]:
        return await self._post("/flush_cache")

    async def update_weights_from_disk(self, model_path: str, **kwargs: Any) -> dict[str, Any]:
        return await self._post("/update_weights_from_disk", {"model_path": model_path, **kwargs})

    async def health(self) -> bool:
        try:
            return (await self._http.get("/health")).status_code == 200
        except httpx.HTTPError:
            return False


def _answer(r: httpx.Response) -> dict[str, Any]:
    if r.status_code != 200:
        raise RolloutError(r.status_code, _message(r))
    return r.json()


def _message(r: httpx.Response) -> str:
    try:
        return r.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return r.text[:500]
