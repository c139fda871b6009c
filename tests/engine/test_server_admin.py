"""Admin fan-out (abort / pause / continue / update weights), health, metrics, and the plugin."""

import re
import threading
import time

import httpx
import pytest
from seer_sglang.launch.instances import is_instance_command
from seer_sglang.launch.waiting import wait_until


def _post(url, path, body=None, timeout=300):
    return httpx.post(f"{url}{path}", json=body or {}, timeout=timeout)


class Background:
    """Runs one rollout in a thread so the test can act while it is in flight."""

    def __init__(self, url, body):
        self.result = None
        self.thread = threading.Thread(target=self._run, args=(url, body), daemon=True)
        self.thread.start()

    def _run(self, url, body):
        self.result = _post(url, "/v1/rollout", body)

    def join(self, timeout=300):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "rollout did not return"
        return self.result


def _instances(url):
    return httpx.get(f"{url}/instances", timeout=10).json()["instances"]


def _wait_running(url, timeout=60):
    wait_until(lambda: any(i["inflight_chunks"] for i in _instances(url)), timeout, 0.1, "a chunk in flight")


def _long(prompt, **kw):
    return {"prompts": [{"text": prompt, **kw}], "n": 2, "max_tokens": 3000, "temperature": 1.0,
            "ignore_eos": True}


def test_plugin_logged_once_in_every_sglang_process(servers):
    """Each instance's launcher loads the plugin once; its scheduler and detokenizer, forked from it on
    a CPU, run with its hooks and say so (spawned, each loads the plugin itself)."""
    forked: set[int] = set()
    for log in sorted(servers.seer.log_dir.glob("instance-*.log")):
        text = log.read_text()
        roles = re.findall(r"seer_sglang plugin loaded \(pid=\d+, role=(\w+)", text)
        assert sorted(roles) == sorted(set(roles)), roles  # once per process
        into = [int(pid) for pid in re.findall(r"seer_sglang plugin hooks forked into pid=(\d+)", text)]
        forked |= set(into)
        assert len(roles) >= 3 and {"scheduler", "detokenizer_manager"} <= set(roles) or len(into) >= 2, (roles, into)
    children = {c.pid for p in servers.seer.descendants() if is_instance_command(p.cmdline()) for c in p.children()}
    assert children and children <= forked or not forked, (children, forked)
    plain_log = servers.plain.spec.log_path.read_text()
    assert "seer_sglang plugin loaded" not in plain_log  # baseline runs without it


def test_abort_by_group_id_frees_only_that_group(seer_url):
    victim = Background(seer_url, _long("abort me", group_id="victim-group"))
    _wait_running(seer_url)
    other = _post(seer_url, "/v1/rollout", {"prompts": ["keep me"], "n": 2, "max_tokens": 8})
    r = _post(seer_url, "/abort_request", {"rid": "victim-group"})
    assert r.status_code == 200 and r.json()["success"]
    assert r.headers["x-seer-aborted-samples"] == "2"
    aborted = victim.join().json()["samples"]
    assert [s["finish_reason"] for s in aborted] == ["abort", "abort"]
    assert all(len(s["output_ids"]) < 3000 for s in aborted)
    assert other.status_code == 200 and all(s["finish_reason"] == "length" for s in other.json()["samples"])


def test_abort_all_fans_out_and_instances_drain(seer_url):
    bg = Background(seer_url, _long("abort all"))
    _wait_running(seer_url)
    r = _post(seer_url, "/abort_request", {"abort_all": True})
    assert r.status_code == 200 and len(r.json()["instances"]) == 2
    assert all(i["status"] == 200 for i in r.json()["instances"])
    assert all(s["finish_reason"] == "abort" for s in bg.join().json()["samples"])
    wait_until(lambda: all(i["running"] == 0 and i["inflight_chunks"] == 0 for i in _instances(seer_url)), 30, 0.5,
               "the instances idle after the abort")


def test_pause_holds_rollout_samples_and_loses_nothing(seer_url):
    """``/v1/rollout`` samples wait through a pause (SGLang's mode "abort" returns only ``/generate``
    callers' samples, which can be resent) and go on from the tokens they have."""
    body = {"prompts": ["pause me"], "n": 2, "max_tokens": 400, "temperature": 1.0, "ignore_eos": True}
    bg = Background(seer_url, body)
    _wait_running(seer_url)
    r = _post(seer_url, "/pause_generation", {})
    assert r.status_code == 200 and r.json()["success"] and len(r.json()["instances"]) == 2
    assert r.json()["message"] == "Generation paused successfully." and r.headers["x-seer-returned-samples"] == "0"
    assert _post(seer_url, "/pause_generation", {"mode": "later"}).status_code == 400
    time.sleep(1.5)
    assert bg.thread.is_alive()  # paused, not finished
    r = _post(seer_url, "/continue_generation", {})
    assert r.status_code == 200 and r.json()["success"]
    samples = bg.join().json()["samples"]
    assert [s["finish_reason"] for s in samples] == ["length", "length"]
    assert all(len(s["output_ids"]) == 400 == len(s["logprobs"]) for s in samples)


@pytest.mark.parametrize("mode", ["retract", "in_place"])
def test_a_retract_or_in_place_pause_keeps_generate_calls_open_and_changes_no_token(seer_url, plain_url, mode):
    """SGLang's other pause modes keep the requests on the instances (retracted to the queue, or held
    where they are): a ``/generate`` call in flight stays open through the pause, is not answered as an
    abort, and ends with the tokens it would have had unpaused."""
    body = {"text": f"pause {mode}", "sampling_params": {"max_new_tokens": 300, "temperature": 0,
                                                         "ignore_eos": True}}
    want = _post(plain_url, "/generate", body).json()["output_ids"]
    box = {}
    call = threading.Thread(target=lambda: box.update(r=_post(seer_url, "/generate", body)), daemon=True)
    call.start()
    _wait_running(seer_url)
    r = _post(seer_url, "/pause_generation", {"mode": mode})
    assert r.status_code == 200 and r.headers["x-seer-returned-samples"] == "0", r.text
    try:
        time.sleep(1.5)
        assert call.is_alive()  # held, not answered
    finally:
        assert _post(seer_url, "/continue_generation", {}).status_code == 200
    call.join(300)
    assert not call.is_alive()
    got = box["r"].json()
    assert got["meta_info"]["finish_reason"]["type"] == "length" and got["output_ids"] == want


def test_update_weights_from_disk_fans_out(seer_url, tiny_model):
    before = _post(seer_url, "/v1/completions", {"prompt": "x y z", "max_tokens": 8, "temperature": 0}).json()
    r = _post(seer_url, "/update_weights_from_disk", {"model_path": tiny_model})
    assert r.status_code == 200, r.text
    assert [i["status"] for i in r.json()["instances"]] == [200, 200]
    after = _post(seer_url, "/v1/completions", {"prompt": "x y z", "max_tokens": 8, "temperature": 0}).json()
    assert after["choices"][0]["text"] == before["choices"][0]["text"]
    bad = _post(seer_url, "/update_weights_from_disk", {})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "model_path"


def test_health_and_metrics(seer_url):
    assert httpx.get(f"{seer_url}/health").json() == {
        "status": "ok", "healthy_instances": 2, "instances": 2,
        "supervisor": {"restarts": {}, "restarting": [], "down_for_good": [], "held": {}}}
    _post(seer_url, "/v1/completions", {"prompt": "metrics", "max_tokens": 5, "n": 2})
    time.sleep(1.0)  # one telemetry poll
    text = httpx.get(f"{seer_url}/metrics").text
    assert re.search(r'seer_requests_total\{endpoint="/v1/completions",status="200"\} [1-9]', text)
    tokens = float(re.search(r"^seer_generation_tokens_total (\S+)", text, re.M).group(1))
    assert tokens >= 10
    assert 'seer_instance_healthy{instance="0"} 1.0' in text
    assert 'seer_instance_healthy{instance="1"} 1.0' in text
    assert "seer_instance_kv_usage" in text and "seer_sample_latency_seconds_bucket" in text
