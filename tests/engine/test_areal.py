"""AReaL 1.0.4's own SGLang client driving seer_sglang: ``RemoteInfEngine.agenerate`` with AReaL's
``SGLangBackend`` (every request body built and every answer parsed by AReaL's code, sent with its
aiohttp helper), against seer and plain SGLang side by side. Greedy, float32: a sample that a pause or
a weight update cut short, and that AReaL resent with its tokens so far, ends with exactly the tokens
plain SGLang samples unchunked.

The one thing the test stands in for is AReaL's ``WorkflowExecutor``, whose only part ``agenerate``
reads is ``is_paused()``: the flag the trainer sets around a pause, set here by the test
(``areal_client.TrainerPause``)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from areal_client import engine as _engine, load, pause_and_continue

PROMPT_IDS = [1, 17, 42, 99, 7, 256, 3]


@pytest.fixture(scope="module")
def areal():
    loaded = load()
    if loaded is None:
        pytest.skip("AReaL is not installed (bash scripts/setup.sh installs it)")
    return loaded


def _request(areal, max_new_tokens: int, ignore_eos: bool = False):
    _, _, io_struct, cli_args = areal
    gconfig = cli_args.GenerationHyperparameters(greedy=True, max_new_tokens=max_new_tokens, ignore_eos=ignore_eos)
    return io_struct.ModelRequest(input_ids=list(PROMPT_IDS), gconfig=gconfig)


def _generate(engine, request):
    return asyncio.run(engine.agenerate(request))


def test_areal_generate_matches_plain_sglang(areal, seer_url, plain_url):
    outs = {}
    for name, url in (("seer", seer_url), ("plain", plain_url)):
        engine, reasons = _engine(areal, url)
        outs[name] = (_generate(engine, _request(areal, 24)), reasons)
    (got, got_reasons), (want, want_reasons) = outs["seer"], outs["plain"]
    assert got.output_tokens == want.output_tokens and len(got.output_tokens) > 0
    assert len(got.output_logprobs) == len(want.output_logprobs) == len(want.output_tokens)
    assert max(abs(a - b) for a, b in zip(got.output_logprobs, want.output_logprobs)) < 1e-3
    assert got.stop_reason == want.stop_reason and got_reasons == want_reasons  # one answer each


def _run_in_thread(fn):
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(out=fn()))
    thread.start()
    return thread, box


def _under_way() -> None:
    """A moment for the sample to be well under way; a pause that came after it finished would
    leave no abort for the tests' first assertion to see, so a machine too fast for this fails loudly."""
    time.sleep(1.5)


def test_areal_pause_returns_partial_tokens_and_the_resent_sample_is_unchanged(areal, seer_url, plain_url):
    """AReaL's weight-sync pause: ``pause_generation`` (SGLang's mode "abort") answers the running
    sample as an abort with its tokens so far; AReaL waits while paused, then resends prompt + tokens."""
    n = 1500
    plain, _ = _engine(areal, plain_url)
    want = _generate(plain, _request(areal, n, ignore_eos=True))
    engine, reasons = _engine(areal, seer_url)
    thread, box = _run_in_thread(lambda: _generate(engine, _request(areal, n, ignore_eos=True)))
    _under_way()
    assert pause_and_continue(engine, reasons) == ["abort"], "the pause did not answer the running sample"
    thread.join(600)
    got = box["out"]
    assert reasons[-1] == "length" and len(reasons) >= 2
    assert got.output_tokens == want.output_tokens and len(got.output_logprobs) == n
    assert max(abs(a - b) for a, b in zip(got.output_logprobs, want.output_logprobs)) < 1e-3


def test_areal_weight_update_with_abort_all_requests(areal, seer_url, plain_url, tiny_model):
    """AReaL's disk update (``abort_all_requests: true``, built by its backend, sent by its helper)
    aborts the running sample with its tokens so far; AReaL resends it, and it runs on the weights
    loaded (the same checkpoint again, so the tokens are plain SGLang's)."""
    _, remote_inf_engine, io_struct, _ = areal
    from areal.infra.utils.http import arequest_with_retry

    n = 1500
    plain, _ = _engine(areal, plain_url)
    want = _generate(plain, _request(areal, n, ignore_eos=True))
    engine, reasons = _engine(areal, seer_url)
    requests = engine.backend.build_disk_weight_update_requests(io_struct.WeightUpdateMeta(type="disk", path=tiny_model))
    assert requests.requests[0].payload["abort_all_requests"] is True
    thread, box = _run_in_thread(lambda: _generate(engine, _request(areal, n, ignore_eos=True)))
    _under_way()

    async def update():
        for req in requests.requests:
            await arequest_with_retry(addr=engine.addresses[0], endpoint=req.endpoint, payload=req.payload,
                                      method=req.method, max_retries=1, timeout=600)

    asyncio.run(update())
    thread.join(600)
    got = box["out"]
    assert "abort" in reasons and reasons[-1] == "length"
    assert got.output_tokens == want.output_tokens
