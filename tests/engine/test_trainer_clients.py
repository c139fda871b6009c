"""A trainer's own SGLang client driving seer_sglang: veRL 0.9.1's ``HttpServerAdapter`` and
``AsyncHttpServerAdapter`` (verl/workers/rollout/sglang_rollout/http_server_engine.py), the HTTP client
of veRL's SGLang rollout, pointed at seer and at plain SGLang side by side. Every request here is made
by veRL's code: generate (sync and async), GET /flush_cache with its retries, sleep mode, abort.

AReaL's client is driven in test_areal.py; both trainers' clients send images in test_vlm.py. slime has no
package (a git checkout only); its request bodies are replayed from its source in test_native_generate.py."""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

import pytest

import verl_client

PROMPT_IDS = [1, 17, 42, 99, 7, 256, 3]
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 16}


@pytest.fixture(scope="module")
def verl_http():
    module = verl_client.load()
    if module is None:
        pytest.skip("verl is not installed (bash scripts/setup.sh installs it)")
    return module


def test_verl_generate_flush_and_sleep_mode(verl_http, seer_url, plain_url, tiny_model):
    seer, plain = (verl_client.adapter(verl_http, url, tiny_model) for url in (seer_url, plain_url))
    answers = [a.generate(input_ids=PROMPT_IDS, sampling_params=GREEDY, return_logprob=True) for a in (seer, plain)]
    got, want = answers
    assert got["output_ids"] == want["output_ids"] and got["text"] == want["text"]
    assert got["meta_info"]["finish_reason"] == want["meta_info"]["finish_reason"]
    assert [e[1] for e in got["meta_info"]["output_token_logprobs"]] == got["output_ids"]
    for a, b in zip(got["meta_info"]["output_token_logprobs"], want["meta_info"]["output_token_logprobs"]):
        assert abs(a[0] - b[0]) < 1e-3
    seer.flush_cache()  # veRL's GET, retried until SGLang's 200
    seer.release_memory_occupation(tags=["kv_cache", "weights"])
    seer.resume_memory_occupation(tags=["weights"])
    seer.resume_memory_occupation(tags=["kv_cache"])
    again = seer.generate(input_ids=PROMPT_IDS, sampling_params=GREEDY)
    assert again["output_ids"] == want["output_ids"]


def test_verl_async_generate_and_abort(verl_http, seer_url, tiny_model):
    adapter = verl_client.adapter(verl_http, seer_url, tiny_model, asynchronous=True)

    async def run():
        short = await adapter.async_generate(input_ids=PROMPT_IDS, sampling_params=GREEDY)
        long = asyncio.create_task(adapter.async_generate(
            input_ids=PROMPT_IDS, sampling_params={"max_new_tokens": 3000, "ignore_eos": True}))
        await asyncio.sleep(1.0)
        aborted = await adapter.abort_request(abort_all=True)
        return short, aborted, await long

    short, aborted, long = asyncio.run(run())
    assert len(short["output_ids"]) == GREEDY["max_new_tokens"]
    assert aborted is not None
    assert long["meta_info"]["finish_reason"]["type"] == "abort" and len(long["output_ids"]) < 3000


def test_sglangs_own_http_adapter(seer_url, plain_url, tiny_model):
    """SGLang's own ``HttpServerEngineAdapter`` (sglang/srt/entrypoints/http_server_engine.py), the HTTP
    client SGLang ships for trainers, on seer and on plain SGLang. Its constructor launches a server,
    so it is built around the running ones' addresses; every request is then the adapter's own,
    ``priority`` included (SGLang without priority scheduling leaves it unused, and so does seer)."""
    from sglang.srt.entrypoints.http_server_engine import HttpServerEngineAdapter
    from sglang.srt.server_args import ServerArgs

    def adapter(url: str) -> HttpServerEngineAdapter:
        address = urlparse(url)
        a = object.__new__(HttpServerEngineAdapter)
        a.server_args = ServerArgs(model_path=tiny_model, host=address.hostname, port=address.port, device="cpu")
        return a

    seer, plain = adapter(seer_url), adapter(plain_url)
    got, want = (a.generate(input_ids=PROMPT_IDS, sampling_params=GREEDY, return_logprob=True, priority=1)
                 for a in (seer, plain))
    assert got["output_ids"] == want["output_ids"] and got["meta_info"]["finish_reason"] == want["meta_info"]["finish_reason"]
    assert [e[1] for e in got["meta_info"]["output_token_logprobs"]] == want["output_ids"]
