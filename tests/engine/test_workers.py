"""The router's worker routes, used the way slime (THUDM/slime at 624b824) uses them: it finds the
engines to abort through ``GET /workers`` and sends each ``abort_all`` (slime/rollout/sglang_rollout.py,
``abort``); its engines register with ``POST /workers`` and a JSON body, and at shutdown find their
own entry in ``GET /workers`` by URL and leave with ``DELETE /workers/{id}``
(slime/backends/sglang_utils/sglang_engine.py). Older routers' ``/list_workers``, ``/add_worker?url=``
and ``/remove_worker?url=`` are kept."""

from __future__ import annotations

import time

import httpx

from conftest import BackgroundRollout
from seer_sglang.launch.waiting import wait_until

CHUNK = 16


def _instances(seer_url: str) -> list[dict]:
    return httpx.get(f"{seer_url}/instances", timeout=10).json()["instances"]


def test_workers_name_the_frontend_and_slimes_abort_ends_every_sample(seer_url):
    assert httpx.get(f"{seer_url}/list_workers", timeout=10).json() == {"urls": [seer_url]}
    listed = httpx.get(f"{seer_url}/workers", timeout=10).json()
    # the frontend first (an abort sent there reaches its queue), then each instance behind it
    assert listed["total"] == 3 and listed["workers"][0]["url"] == seer_url
    assert [w["url"] for w in listed["workers"][1:]] == [i["url"] for i in _instances(seer_url)]
    assert all(w["is_healthy"] for w in listed["workers"]) and len(listed["workers"][0]["instances"]) == 2
    assert httpx.get(f"{seer_url}/workers/{listed['workers'][1]['id']}", timeout=10).json() == listed["workers"][1]

    # 24 long samples: more than the instances run at once, so some wait in the frontend's queue
    body = {"prompts": [{"input_ids": [11 + p, 12, 13, 14]} for p in range(6)], "n": 4, "max_tokens": 4000,
            "temperature": 0, "ignore_eos": True}
    run = BackgroundRollout(seer_url, body)
    wait_until(lambda: sum(i["inflight_chunks"] for i in _instances(seer_url)), 120, 0.1, "a chunk in flight")
    time.sleep(1.0)
    # slime's abort, verbatim in shape: every worker the router lists gets abort_all
    urls = [w["url"] for w in httpx.get(f"{seer_url}/workers", timeout=10).json()["workers"]]
    for url in urls:
        assert httpx.post(f"{url}/abort_request", json={"abort_all": True}, timeout=60).status_code == 200
    data = run.wait(120).json()
    assert len(data["samples"]) == 24
    assert all(s["finish_reason"] == "abort" for s in data["samples"]), [s["finish_reason"] for s in data["samples"]]
    assert all(len(s["output_ids"]) < 4000 for s in data["samples"])
    wait_until(lambda: sum(i["inflight_chunks"] for i in _instances(seer_url)) == 0, 30, 0.1,
               "no chunk in flight after the abort")


def _slime_register(seer_url: str, engine_url: str) -> None:
    """slime's engine start (``SGLangEngine.init``): POST {router}/workers, then raise_for_status()."""
    response = httpx.post(f"{seer_url}/workers", json={"url": engine_url, "worker_type": "regular"}, timeout=60)
    response.raise_for_status()


def _slime_deregister(seer_url: str, engine_url: str) -> None:
    """slime's engine shutdown: its own entry in GET {router}/workers, then DELETE /workers/{id}."""
    for worker in httpx.get(f"{seer_url}/workers", timeout=10).json()["workers"]:
        if worker["url"] == engine_url:
            httpx.delete(f"{seer_url}/workers/{worker['id']}", timeout=30).raise_for_status()
            return
    raise AssertionError(f"{engine_url} is not listed")


def test_an_engine_registered_as_slime_does_takes_chunks_and_leaves(seer_url, plain_url):
    """A plain SGLang instance of the same model registers (as slime's engines do), is listed, takes
    chunks with the same greedy tokens, and after it leaves gets nothing more, while it keeps running."""
    assert httpx.post(f"{seer_url}/add_worker", params={"url": "ftp://x"}, timeout=30).status_code == 400
    for host in ("a..b", "a" * 64):  # host names the resolver's IDNA encoding refuses
        r = httpx.post(f"{seer_url}/workers", json={"url": f"http://{host}:30000"}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "url", r.text
    # a backslash in the host: httpx takes it, aiohttp's parser (the instance client's) does not
    for route in ("/add_worker", "/remove_worker"):
        r = httpx.post(f"{seer_url}{route}", params={"url": " \t\x0b\thttps://\\"}, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "url", r.text
    r = httpx.post(f"{seer_url}/workers", json={"url": "https://\\x"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "url", r.text
    r = httpx.post(f"{seer_url}/workers", json={"url": "http://127.0.0.1:9"}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "worker_unreachable"
    r = httpx.post(f"{seer_url}/workers", json={"url": seer_url}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "not_an_instance"
    r = httpx.post(f"{seer_url}/workers", json={"url": plain_url, "worker_type": "prefill", "bootstrap_port": 8998},
                   timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_worker_type"
    assert httpx.delete(f"{seer_url}/workers/instance-99", timeout=30).status_code == 404
    assert httpx.delete(f"{seer_url}/workers/seer_sglang", timeout=30).status_code == 400
    r = httpx.post(f"{seer_url}/remove_worker", params={"url": "http://127.0.0.1:9"}, timeout=30)
    assert r.status_code == 404

    before = httpx.get(f"{seer_url}/scheduler", timeout=10).json()
    httpx.post(f"{seer_url}/scheduler", json={"name": "context", "chunk_size": CHUNK}, timeout=30).raise_for_status()
    try:
        _slime_register(seer_url, plain_url)
        entry = next(w for w in httpx.get(f"{seer_url}/workers", timeout=10).json()["workers"] if w["url"] == plain_url)
        index = int(entry["id"].removeprefix("instance-"))
        again = httpx.post(f"{seer_url}/add_worker", params={"url": plain_url + "/"}, timeout=60).json()
        assert again["status"] == "already a worker" and again["instance"] == index
        assert [i["index"] for i in _instances(seer_url)] == [0, 1, index]

        prompts = [[(17 * p + 3 * i) % 1500 + 20 for i in range(30)] for p in range(6)]
        body = {"prompts": [{"input_ids": p} for p in prompts], "n": 2, "max_tokens": 64, "temperature": 0,
                "ignore_eos": True}
        samples = httpx.post(f"{seer_url}/v1/rollout", json=body, timeout=600).json()["samples"]
        assert any(c["instance"] == index for s in samples for c in s["chunks"])  # it took chunks
        with httpx.Client(timeout=600) as http:
            want = [http.post(f"{plain_url}/generate", json={"input_ids": p, "sampling_params": {
                "max_new_tokens": 64, "temperature": 0, "ignore_eos": True}}).json()["output_ids"] for p in prompts]
        assert all(s["output_ids"] == want[s["prompt_index"]] for s in samples)

        _slime_deregister(seer_url, plain_url)
        assert [i["index"] for i in _instances(seer_url)] == [0, 1]
        assert plain_url not in [w["url"] for w in httpx.get(f"{seer_url}/workers", timeout=10).json()["workers"]]
        samples = httpx.post(f"{seer_url}/v1/rollout", json=body, timeout=600).json()["samples"]
        assert not any(c["instance"] == index for s in samples for c in s["chunks"])
        assert all(s["output_ids"] == want[s["prompt_index"]] for s in samples)
        # the older routers' form: the same engine back in with /add_worker, out with /remove_worker
        assert httpx.post(f"{seer_url}/add_worker", params={"url": plain_url}, timeout=60).json()["instance"] == index
        removed = httpx.post(f"{seer_url}/remove_worker", params={"url": plain_url}, timeout=30)
        assert removed.status_code == 200 and removed.json()["instance"] == index
    finally:
        httpx.post(f"{seer_url}/remove_worker", params={"url": plain_url}, timeout=30)
        httpx.post(f"{seer_url}/scheduler", json=before, timeout=30)
    assert httpx.get(f"{plain_url}/health", timeout=10).status_code == 200  # removal leaves it running


def test_a_server_started_without_instances_serves_the_engines_that_register(plain_url, tiny_model, tmp_path):
    """slime's own engines and seer as its router: the server starts with no SGLang instance of its own
    (``--num-instances 0``), answers 503 on /health until an engine registers, then serves it."""
    from seer_sglang.launch.seer_process import start_seer, stop_seer, wait_seer

    server = start_seer(tiny_model, tmp_path / "seer0", "--num-instances", "0", "--scheduler", "context",
                        "--chunk-size", str(CHUNK))
    try:
        wait_seer(server, status=503)
        listed = httpx.get(f"{server.url}/workers", timeout=10).json()
        assert [w["url"] for w in listed["workers"]] == [server.url]  # the frontend alone
        _slime_register(server.url, plain_url)
        wait_until(lambda: httpx.get(f"{server.url}/health", timeout=10).status_code == 200, 60, 0.2,
                   "healthy once an engine registered")
        ids = [(5 * i) % 900 + 30 for i in range(20)]
        params = {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True}
        got = httpx.post(f"{server.url}/generate", json={"input_ids": ids, "sampling_params": params},
                         timeout=300).json()
        want = httpx.post(f"{plain_url}/generate", json={"input_ids": ids, "sampling_params": params},
                          timeout=300).json()
        assert got["output_ids"] == want["output_ids"]  # in three chunks of 16
        _slime_deregister(server.url, plain_url)
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 503
    finally:
        stop_seer(server)
    assert httpx.get(f"{plain_url}/health", timeout=10).status_code == 200
