"""A small typed client for the rollout API, for RL trainers.

    from seer_sglang.client import RolloutClient
    result = RolloutClient("http://127.0.0.1:30000").rollout(["What is 2+3?"], n=8, max_tokens=512)
    for s in result.samples: s.output_ids, s.logprobs, s.text, s.finish_reason

It streams the NDJSON response, so a tqdm bar shows samples as they finish.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence, Union

import httpx

Prompt = Union[str, list[int], list[dict[str, Any]], dict[str, Any]]


class RolloutError(RuntimeError):
    def __init__(self, status_code: int, message: str):
        super().__init__(f"HTTP {status_code}: {message}")
        self.status_code = status_code
        self.message = message


@dataclass
class Chunk:
    instance: int
    start: float
    end: float | None
    tokens: int
    cached_tokens: int = 0
    kv: dict[str, int] | None = None  # context tokens by source: device, host, pool, recomputed
    spec: dict[str, int] | None = None  # speculative decoding: draft_steps, accepted_tokens


@dataclass
class RolloutSample:
    prompt_index: int
    group_id: str
    index: int
    output_ids: list[int]
    text: str
    logprobs: list[float] | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    first_token_s: float | None
    chunks: list[Chunk] = field(default_factory=list)
    error: str | None = None
    rid: str = ""
    spec: dict[str, Any] | None = None  # draft_steps, accepted_tokens, mean_acceptance_length

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RolloutSample":
        timing = d.get("timing") or {}
        return cls(prompt_index=d["prompt_index"], group_id=d["group_id"], index=d["index"],
                   output_ids=d["output_ids"], text=d["text"], logprobs=d.get("logprobs"),
                   finish_reason=d.get("finish_reason"), prompt_tokens=d["prompt_tokens"],
                   completion_tokens=d["completion_tokens"], latency_s=timing.get("latency_s", 0.0),
                   first_token_s=timing.get("first_token_s"),
                   chunks=[Chunk(**c) for c in d.get("chunks") or []], error=d.get("error"), rid=d.get("rid", ""),
                   spec=d.get("spec"))


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


class RolloutClient:
    def __init__(self, base_url: str = "http://127.0.0.1:30000", timeout_s: float | None = None):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(timeout_s, connect=10.0))

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

        body = {"prompts": [_prompt_json(p) for p in prompts], "n": n, "stream": True, **sampling}
        total = sum((p.get("n") or n) if isinstance(p, dict) else n for p in body["prompts"])
        samples: list[RolloutSample] = []
        summary: dict[str, Any] = {}
        with tqdm(total=total, desc="rollout", unit="sample", disable=not progress) as bar:
            with self._http.stream("POST", "/v1/rollout", json=body) as r:
                if r.status_code != 200:
                    r.read()
                    raise RolloutError(r.status_code, _message(r))
                for line in r.iter_lines():
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "sample":
                        samples.append(RolloutSample.from_json(event))
                        bar.update(1)
                    elif event.get("type") == "summary":
                        summary = event
        samples.sort(key=lambda s: (s.prompt_index, s.index))
        return RolloutResult(samples, summary)

    def _post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        r = self._http.post(path, json=body or {})
        if r.status_code != 200:
            raise RolloutError(r.status_code, _message(r))
        return r.json()

    def abort(self, rid: str = "", abort_all: bool = False) -> dict[str, Any]:
        return self._post("/abort_request", {"rid": rid, "abort_all": abort_all})

    def pause(self) -> dict[str, Any]:
        return self._post("/pause_generation")

    def resume(self) -> dict[str, Any]:
        return self._post("/continue_generation")

    def update_weights_from_disk(self, model_path: str, **kwargs: Any) -> dict[str, Any]:
        return self._post("/update_weights_from_disk", {"model_path": model_path, **kwargs})

    def health(self) -> bool:
        try:
            return self._http.get("/health").status_code == 200
        except httpx.HTTPError:
            return False


def _message(r: httpx.Response) -> str:
    try:
        return r.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return r.text[:500]
