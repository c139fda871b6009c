"""What one request, and all of them together, may cost: refused up front with a clear error (413,
400, or 429 when the server is full), and the server keeps serving."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from conftest import running_seer
from seer_sglang.launch.waiting import wait_until

PER_REQUEST, IN_FLIGHT = 8, 12


@pytest.fixture(scope="module")
def bounded(tiny_model, seer_url, tmp_path_factory):
    """A frontend with tight limits over the shared server's instances: the limits are the frontend's."""
    first = httpx.get(f"{seer_url}/instances", timeout=10).json()["instances"][0]["url"]
    with running_seer(tiny_model, tmp_path_factory.mktemp("limits"), "--instance-urls", first,
                      "--max-body-mb", "0.01", "--max-request-samples", str(PER_REQUEST),
                      "--max-samples-in-flight", str(IN_FLIGHT)) as server:
        yield server


def _error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["message"], err
    return err


def test_a_body_over_the_limit_is_refused_before_it_is_read(bounded):
    big = {"prompts": ["x" * 20_000], "max_tokens": 1}
    assert "--max-body-mb" in _error(httpx.post(f"{bounded.url}/v1/rollout", json=big, timeout=60), 413,
                                     "request_too_large")["message"]
    ok = httpx.post(f"{bounded.url}/v1/rollout", json={"prompts": ["hi"], "max_tokens": 2}, timeout=120)
    assert ok.status_code == 200 and len(ok.json()["samples"]) == 1


def test_too_many_samples_in_one_request(bounded):
    body = {"prompts": ["a", "b", "c"], "n": 3, "max_tokens": 2}  # 9 > 8
    _error(httpx.post(f"{bounded.url}/v1/rollout", json=body, timeout=60), 400, "too_many_samples")
    chat = {"messages": [{"role": "user", "content": "hi"}], "n": PER_REQUEST + 1, "max_tokens": 2}
    _error(httpx.post(f"{bounded.url}/v1/chat/completions", json=chat, timeout=60), 400, "too_many_samples")
    native = {"input_ids": [[1, 2, 3]] * (PER_REQUEST + 1), "sampling_params": {"max_new_tokens": 2}}
    _error(httpx.post(f"{bounded.url}/generate", json=native, timeout=60), 400, "too_many_samples")


def test_a_full_server_answers_429_and_takes_the_request_once_samples_finish(bounded):
    long = {"prompts": [{"input_ids": [5, 6, 7, 8]}], "n": PER_REQUEST, "max_tokens": 1500, "temperature": 0,
            "ignore_eos": True}
    box: dict = {}
    worker = threading.Thread(target=lambda: box.update(r=httpx.post(f"{bounded.url}/v1/rollout", json=long,
                                                                     timeout=600)))
    worker.start()
    wait_until(lambda: any(i["inflight_chunks"] for i in httpx.get(f"{bounded.url}/instances", timeout=10).json()["instances"]),
               60, 0.05, "a chunk in flight")
    more = {"prompts": ["again"], "n": 5, "max_tokens": 2}  # 8 held + 5 > 12
    err = _error(httpx.post(f"{bounded.url}/v1/rollout", json=more, timeout=60), 429, "server_full")
    assert "--max-samples-in-flight" in err["message"]
    worker.join(600)
    assert box["r"].status_code == 200 and len(box["r"].json()["samples"]) == PER_REQUEST  # nothing lost
    again = httpx.post(f"{bounded.url}/v1/rollout", json=more, timeout=120)
    assert again.status_code == 200 and len(again.json()["samples"]) == 5


def test_a_chunked_body_over_the_limit_is_refused_as_it_is_read(bounded):
    """No Content-Length: the bound holds on the bytes read."""
    def chunks():
        yield b'{"prompts": ["'
        for _ in range(40):
            yield b"x" * 1000
        yield b'"], "max_tokens": 1}'

    for route in ("/v1/rollout", "/generate"):
        r = httpx.post(f"{bounded.url}{route}", content=chunks(), timeout=60,
                       headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large", r.text
    ok = httpx.post(f"{bounded.url}/v1/rollout", json={"prompts": ["hi"], "max_tokens": 2}, timeout=120)
    assert ok.status_code == 200


def test_sample_counts_are_checked_before_samples_are_built(bounded):
    """A request for a billion samples is refused at once, from the counts in its body."""
    huge = [
        ("/v1/rollout", {"prompts": [{"input_ids": [5, 6], "n": 1024}] * 20, "max_tokens": 1}),
        ("/v1/completions", {"prompt": [[5, 6]] * 40, "n": 1000, "max_tokens": 1}),
        ("/generate", {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 1, "n": 10**9}}),
    ]
    for route, body in huge:
        start = time.monotonic()
        _error(httpx.post(f"{bounded.url}{route}", json=body, timeout=60), 400, "too_many_samples")
        assert time.monotonic() - start < 5
