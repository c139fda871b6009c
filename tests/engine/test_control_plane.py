"""SGLang's control-plane and discovery routes on seer_sglang, called the way trainers call them
(slime's sglang_engine.py / server_control.py, veRL's ServerAdapter, AReaL's remote engine)."""

from __future__ import annotations

import httpx

from seer_sglang.launch.waiting import wait_until


def test_flush_cache_answers_get_and_post(seer_url):
    # slime and veRL: GET /flush_cache until it answers 200 (an instance still finishing an aborted
    # request of an earlier test refuses, as SGLang does)
    for method in ("GET", "POST"):
        wait_until(lambda: httpx.request(method, f"{seer_url}/flush_cache", timeout=60).status_code == 200,
                   60, 0.5, "a flush that succeeds")
        r = httpx.request(method, f"{seer_url}/flush_cache", timeout=60)
        assert r.status_code == 200, r.text
        assert all(i["status"] == 200 for i in r.json()["instances"]) and r.json()["message"] == "Success"
    # SGLang's timeout (wait that long for running requests) reaches the instances; a bad one is a 400
    assert httpx.get(f"{seer_url}/flush_cache", params={"timeout": 2}, timeout=60).status_code == 200
    for bad in ("-1", "soon", "nan"):
        r = httpx.get(f"{seer_url}/flush_cache", params={"timeout": bad}, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == "timeout"


def test_server_info_is_an_instances_with_seers_section(seer_url, plain_url):
    plain = httpx.get(f"{plain_url}/server_info", timeout=60).json()
    for path in ("/server_info", "/get_server_info"):
        info = httpx.get(f"{seer_url}{path}", timeout=60).json()
        # what slime reads from an external engine's server info
        for key in ("tp_size", "pp_size", "ep_size", "disaggregation_mode", "model_path"):
            assert key in info and type(info[key]) is type(plain[key]), key
        assert info["seer"]["num_instances"] == 2 and len(info["seer"]["instances"]) == 2
        # slime sizes its weight-sync group from num_gpus: every instance's GPUs, not one's
        assert info["num_gpus"] == 2 * info["tp_size"] * info["pp_size"] == info["seer"]["weight_update_ranks"]
        # the CPU instances sample with SGLang's seeded torch sampler, and say what that guarantees
        assert info["sampling_backend"] == "pytorch" and info["seer"]["sampling"]["seeded"] is True


def test_model_info_and_weight_version(seer_url, plain_url):
    plain = httpx.get(f"{plain_url}/model_info", timeout=60).json()
    for path in ("/model_info", "/get_model_info"):
        info = httpx.get(f"{seer_url}{path}", timeout=60).json()
        assert set(plain) <= set(info) and info["is_generation"] is True
    version = httpx.get(f"{seer_url}/get_weight_version", timeout=60).json()
    assert version["weight_version"] == info["weight_version"]
    assert [i["weight_version"] for i in version["instances"]] == [info["weight_version"]] * 2


def test_health_generate_and_loads(seer_url):
    assert httpx.get(f"{seer_url}/health_generate", timeout=120).status_code == 200
    loads = httpx.get(f"{seer_url}/v1/loads", params={"include": "core"}, timeout=60)
    assert loads.status_code == 200
    body = loads.json()
    # slime sums num_running_reqs + num_waiting_reqs over "loads" to wait for an idle server
    assert {e["instance"] for e in body["loads"]} == {0, 1}
    assert all("num_running_reqs" in e and "num_waiting_reqs" in e for e in body["loads"])
    assert body["seer"]["pending_samples"] == 0


def test_metrics_reexport_the_instances_sglang_metrics(seer_url):
    from prometheus_client.parser import text_string_to_metric_families

    httpx.post(f"{seer_url}/generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}},
               timeout=120)
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{seer_url}/metrics", timeout=30).text)}
    assert "seer_samples" in families
    running = families["sglang:num_running_reqs"]
    assert {s.labels["instance"] for s in running.samples} == {"0", "1"}
