"""A small typed client for the rollout API, for RL trainers.

    from seer_sglang.client import RolloutClient
    result = RolloutClient("http://127.0.0.1:30000").rollout(["What is 2+3?"], n=8, max_tokens=512)
    for s in result.samples: s.output_ids, s.logprobs, s.text, s.finish_reason

It streams the NDJSON response, so a tqdm bar shows samples as they finish.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence, Union

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
