"""Requests an outside client could send to take the deployment down, on the shared seer server (two
real SGLang instances with the plugin): each gets a clear 4xx, or is freed when its client leaves,
and afterwards both instances are healthy and a normal request still answers."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from conftest import LOOPBACK_ADDRESSES, listening_under, wait_until

PROMPT = [1, 17, 42, 99, 7, 256, 3]
LONG = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}}


def _still_serving(url: str) -> None:
    """Both instances up, nothing left running, and a normal request answers."""
    health = httpx.get(f"{url}/health", timeout=30).json()
    assert health["healthy_instances"] == 2 == health["instances"], health
    ok = httpx.post(f"{url}/generate", timeout=300,
                    json={"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 4, "temperature": 0}})
    assert ok.status_code == 200 and ok.json()["meta_info"]["completion_tokens"] == 4, ok.text


def _idle(url: str) -> bool:
    """No chunk on any instance and no sample in the frontend's buffer."""
    instances = httpx.get(f"{url}/instances", timeout=10).json()["instances"]
    loads = httpx.get(f"{url}/v1/loads", timeout=10).json()
    return (all(i["inflight_chunks"] == 0 and i["running"] == 0 for i in instances)
            and loads["seer"]["pending_samples"] == 0)


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


RESERVED = [{"__seer_slo__": 1}, {"__seer_prior_output__": "x"}, {"__draft_depth__": 3}, {"__seer_anything__": None}]
# values of the plugin's own keys that no frontend writes: each must fail its request, not the instance
BAD_VALUES = [{"__seer_slo__": 1}, {"__seer_slo__": {"tpot_s": "fast"}},
              {"__seer_slo__": {"tpot_s": -1.0, "ttft_s": None, "deadline": None}},
              {"__seer_prior_output__": "x"}, {"__seer_prior_output__": -5}]


def test_every_listener_of_the_deployment_is_loopback(servers):
    """The frontend, its instances (and every process they start), the draft server and the pool's
    reaper listen on loopback only, as the shared server runs them: default hosts, file pool."""
    listening = listening_under(servers.seer.proc.pid)
    ports = [p for ps in listening.values() for p in ps]
    assert len(ports) >= 3, listening  # at least the frontend and the two instances' HTTP servers
    assert {ip for ip, _ in ports} <= LOOPBACK_ADDRESSES, listening


def test_a_reserved_custom_param_is_refused_by_name(seer_url):
    for params in RESERVED:
        key = next(iter(params))
        native = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 8, "custom_params": params}}
        err = _error(httpx.post(f"{seer_url}/generate", json=native, timeout=60), 400)
        assert err["code"] == "reserved_parameter" and key in err["message"], err
        rollout = {"prompts": [{"input_ids": PROMPT, "custom_params": [params]}], "n": 1, "max_tokens": 8}
        assert key in _error(httpx.post(f"{seer_url}/v1/rollout", json=rollout, timeout=60), 400)["message"]
    _still_serving(seer_url)


def test_an_instance_reached_directly_fails_only_the_bad_request(seer_url):
    """The instances' own port, without the frontend (a trainer attached to them): the plugin checks
    each reserved value as the request arrives and fails that request with SGLang's 400."""
    instance = httpx.get(f"{seer_url}/instances", timeout=10).json()["instances"][0]["url"]
    for params in BAD_VALUES:
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 8, "custom_params": params}}
        r = httpx.post(f"{instance}/generate", json=body, timeout=120)
        assert r.status_code == 400 and "invalid custom_params" in r.text, (params, r.text)
        assert httpx.get(f"{instance}/health", timeout=30).status_code == 200
    _still_serving(seer_url)


def test_a_request_that_fills_the_context_leaves_the_instances_up(seer_url):
    """A request runs to the end of the model's context (4,096 tokens here), on an instance reached
    directly and through the frontend. A speculative step there leaves a KV slot
    unfreed and SGLang's idle memory check stops the scheduler: a SEER instance ends such a request a
    verify width short of SGLang's bound, and stays up."""
    context = httpx.get(f"{seer_url}/model_info", timeout=30).json().get("context_length") or 4096
    instance = httpx.get(f"{seer_url}/instances", timeout=10).json()["instances"][0]["url"]
    prompt = [(31 * i) % 1500 + 20 for i in range(context - 60)]
    body = {"input_ids": prompt, "sampling_params": {"temperature": 0, "ignore_eos": True, "max_new_tokens": 60}}
    for url in (instance, seer_url):  # through the frontend the sample ends where its chunk did
        r = httpx.post(f"{url}/generate", json=body, timeout=300)
        assert r.status_code == 200, r.text
        meta = r.json()["meta_info"]
        assert meta["finish_reason"]["type"] == "length" and 0 < meta["completion_tokens"] < 60, meta
        wait_until(lambda: _idle(seer_url), 60, 0.1, "the instances idle")
        time.sleep(1.0)  # SGLang checks its memory when a scheduler turns idle
        assert httpx.get(f"{instance}/health", timeout=30).status_code == 200
    _still_serving(seer_url)


def test_an_slo_the_scheduler_would_divide_by_zero_on_is_refused(seer_url):
    body = {"prompts": [{"input_ids": PROMPT}], "n": 1, "max_tokens": 4}
    for slo in ({"ttft_ms": 5e-324}, {"tpot_ms": 1e-9}):
        r = httpx.post(f"{seer_url}/v1/completions", timeout=60,
                       json={"prompt": PROMPT, "max_tokens": 4, "slo": slo})
        _error(r, 400)
        _error(httpx.post(f"{seer_url}/v1/rollout", json={**body, "slo": slo}, timeout=60), 400)
    _still_serving(seer_url)


def test_n_on_generate_is_bounded(seer_url):
    for n in (0, -3, 2.5, "4", True, 10**9):
        body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2, "n": n}}
        err = _error(httpx.post(f"{seer_url}/generate", json=body, timeout=60), 400)
        assert "n" in (err["param"] or ""), (n, err)


def test_deep_json_and_lone_surrogates_are_client_errors(seer_url):
    deep = "[" * 100_000 + "]" * 100_000
    r = httpx.post(f"{seer_url}/generate", content=deep, headers={"content-type": "application/json"}, timeout=60)
    assert 400 <= r.status_code < 500, r.text
    surrogate = b'{"text": "hi \\ud800 there", "sampling_params": {"max_new_tokens": 2}}'
    r = httpx.post(f"{seer_url}/generate", content=surrogate, headers={"content-type": "application/json"},
                   timeout=120)
    assert r.status_code < 500, r.text
    _still_serving(seer_url)


@pytest.mark.parametrize("route,body", [
    ("/generate", LONG),
    ("/v1/rollout", {"prompts": [{"input_ids": PROMPT}], "n": 2, "max_tokens": 3000, "ignore_eos": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 2, "max_tokens": 3000,
                              "ignore_eos": True}),
])
def test_a_client_that_goes_away_frees_its_work(seer_url, route, body):
    """A non-streaming client that gives up: its samples are aborted on the instances and in the
    frontend's buffer at once, not run to the end for nobody (3,000 tokens take minutes here)."""
    assert _idle(seer_url)
    def give_up() -> None:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{seer_url}{route}", json=body, timeout=3.0)

    gone = threading.Thread(target=give_up)
    gone.start()
    wait_until(lambda: not _idle(seer_url), 60, 0.05, "the request to start")
    gone.join()
    left = time.monotonic()
    wait_until(lambda: _idle(seer_url), 20, 0.05, "the abandoned request to be freed")
    print(f"{route}: freed {time.monotonic() - left:.1f} s after the client left")
    _still_serving(seer_url)


def test_rids_are_exact_and_unique_in_flight(seer_url):
    async def run():
        async with httpx.AsyncClient(base_url=seer_url, timeout=300) as c:
            keep = asyncio.create_task(c.post("/generate", json={**LONG, "rid": "job-7-long"}))
            wait = time.monotonic() + 60
            while not any(i["inflight_chunks"] for i in (await c.get("/instances")).json()["instances"]):
                assert time.monotonic() < wait
                await asyncio.sleep(0.05)
            duplicate = await c.post("/generate", json={**LONG, "rid": "job-7-long"})
            prefix = await c.post("/abort_request", json={"rid": "job-7"})  # a prefix: aborts nothing
            assert not keep.done()
            exact = await c.post("/abort_request", json={"rid": "job-7-long"})
            return duplicate, prefix, exact, await keep

    duplicate, prefix, exact, kept = asyncio.run(run())
    err = _error(duplicate, 400)
    assert err["code"] == "duplicate_rid" and "job-7-long" in err["message"]
    assert prefix.headers["x-seer-aborted-samples"] == "0"
    assert exact.headers["x-seer-aborted-samples"] == "1"
    assert kept.status_code == 200 and kept.json()["meta_info"]["finish_reason"]["type"] == "abort"
    again = httpx.post(f"{seer_url}/generate", timeout=300,  # the rid is free again once its call ended
                       json={"rid": "job-7-long", "input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}})
    assert again.status_code == 200 and again.json()["meta_info"]["id"] == "job-7-long"
    _still_serving(seer_url)


def test_health_generate_answers_under_load(seer_url):
    """While the instances generate, /health_generate says so at once, as SGLang's does (an instance
    that is generating is healthy without another request), and never with an empty 5xx."""
    async def run():
        async with httpx.AsyncClient(base_url=seer_url, timeout=300) as c:
            load = [asyncio.create_task(c.post("/generate", json={**LONG, "rid": f"load-{i}"})) for i in range(4)]
            wait = time.monotonic() + 60
            while not all(i["inflight_chunks"] for i in (await c.get("/instances")).json()["instances"]):
                assert time.monotonic() < wait
                await asyncio.sleep(0.05)
            start = time.monotonic()
            health = await c.get("/health_generate")
            took = time.monotonic() - start
            await c.post("/abort_request", json={"abort_all": True})
            await asyncio.gather(*load)
            return health, took

    health, took = asyncio.run(run())
    assert health.status_code == 200 and took < 25, (health.status_code, health.text, took)
    _still_serving(seer_url)
