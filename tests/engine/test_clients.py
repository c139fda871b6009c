"""The clients a trainer loop uses: ``AsyncRolloutClient`` over HTTP, and ``seer_sglang.Engine`` in the
trainer's own process, each driven the way an asyncio trainer drives SGLang."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import psutil

import seer_sglang
from seer_sglang.client import AsyncRolloutClient

PROMPT_IDS = [1, 17, 42, 99, 7]


def test_async_client_rollout_and_stream(seer_url):
    async def run():
        async with AsyncRolloutClient(seer_url) as client:
            assert await client.health()
            result = await client.rollout(["The sky is", [5, 6, 7]], n=3, max_tokens=8, temperature=1.0)
            streamed = []
            async with contextlib.aclosing(client.stream(["Count: 1, 2,"], n=4, max_tokens=6)) as samples:
                async for sample in samples:
                    streamed.append(sample)
            return result, streamed

    result, streamed = asyncio.run(run())
    assert [len(g) for g in result.by_prompt()] == [3, 3]
    assert all(s.finish_reason in ("length", "stop") and s.logprobs for s in result.samples)
    assert len(streamed) == 4 and {s.group_id for s in streamed} == {streamed[0].group_id}


def test_async_client_leaving_early_aborts_the_rest(seer_url):
    async def run():
        async with AsyncRolloutClient(seer_url) as client:  # a trainer that leaves before the end
            stream = client.stream([[9, 9, 9], [8, 8, 8]], n=2, max_tokens=3000, ignore_eos=True)
            task = asyncio.ensure_future(stream.__anext__())
            await asyncio.sleep(2.0)  # chunks are running
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await task
            await stream.aclose()

    asyncio.run(run())
    for _ in range(100):
        loads = httpx.get(f"{seer_url}/v1/loads", timeout=30).json()
        if loads["seer"]["pending_samples"] == 0 and not any(e["num_running_reqs"] for e in loads["loads"]):
            break
        asyncio.run(asyncio.sleep(0.2))
    else:
        raise AssertionError(f"the abandoned rollout still runs: {loads}")


def test_engine_in_process(tiny_model, plain_url):
    # both of SGLang's keys: generation takes only the API key, weight updates only the admin key
    engine = seer_sglang.Engine(model_path=tiny_model, num_instances=1, dtype="float32", kv_pool="none",
                                draft="none", api_key="engine-key", admin_api_key="engine-admin-key")
    procs = [psutil.Process(p.pid) for p in engine._deployment.procs]
    try:
        body = {"input_ids": PROMPT_IDS, "sampling_params": {"temperature": 0, "max_new_tokens": 8},
                "return_logprob": True}
        out = engine.generate(**body)
        plain = httpx.post(f"{plain_url}/generate", json=body, timeout=120).json()
        assert out["output_ids"] == plain["output_ids"] and out["text"] == plain["text"]
        assert [e[1] for e in out["meta_info"]["output_token_logprobs"]] == plain["output_ids"]

        async def siblings():  # an asyncio trainer sending one request per sample
            return await asyncio.gather(*(engine.async_generate(
                input_ids=[4, 5, 6], sampling_params={"max_new_tokens": 6}) for _ in range(4)))

        outs = asyncio.run(siblings())
        assert len({o["meta_info"]["group_id"] for o in outs}) == 1 and outs[0]["meta_info"]["group_size"] == 4
        result = engine.rollout(["hi there", [3, 4]], n=2, max_tokens=5)
        assert [len(g) for g in result.by_prompt()] == [2, 2]
        updated = engine.update_weights_from_disk(tiny_model, weight_version="step-1")
        assert updated["success"]
        after = engine.generate(**body)
        assert after["meta_info"]["weight_version"] == "step-1" and after["output_ids"] == out["output_ids"]
    finally:
        engine.shutdown()
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)
