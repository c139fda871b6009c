"""What a rollout benchmark watches while plain SGLang runs: each instance's load over time (seer's
frontend reports its own timeline with the rollout's answer)."""

from __future__ import annotations

import asyncio
import time

import httpx


class LoadPoller:
    """Polls ``/v1/loads`` of every instance; the baseline's timeline (seer modes use /timeline)."""

    def __init__(self, urls: list[str], interval_s: float = 0.25):
        self.urls, self.interval_s, self.points, self._task = urls, interval_s, [], None

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=5) as http:
            while True:
                for i, url in enumerate(self.urls):
                    try:
                        d = (await http.get(f"{url}/v1/loads")).json()["loads"][0]
                        self.points.append({"t": time.time(), "instance": i, "kv_used": d["num_used_tokens"],
                                            "kv_capacity": d["max_total_num_tokens"],
                                            "running": d["num_running_reqs"], "waiting": d["num_waiting_reqs"]})
                    except (httpx.HTTPError, KeyError, ValueError):
                        pass
                await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
