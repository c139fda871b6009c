"""An instance dies mid-rollout: its chunks move to the survivor and every sample completes."""

import threading
import time

import httpx
import psutil

from conftest import start_seer, stop_seer, wait_server


def _instance_pids(server):
    """The SGLang server processes the launcher started (its direct children)."""
    return [p for p in psutil.Process(server.proc.pid).children(recursive=False)
            if "sglang.launch_server" in " ".join(p.cmdline())]


def test_killing_one_of_two_instances_loses_no_sample(tiny_model, plain_url, tmp_path):
    server = start_seer(tiny_model, tmp_path, "--num-instances", "2", "--dtype", "float32",
                        "--scheduler", "context", "--chunk-size", "32")
    try:
        wait_server(server)
        prompts = [[5 + i, 17, 300 + 7 * i, 42, 1000 + i] for i in range(6)]
        body = {"prompts": [{"input_ids": p} for p in prompts], "n": 4, "max_tokens": 240, "temperature": 0,
                "ignore_eos": True}
        box = {}
        worker = threading.Thread(target=lambda: box.update(r=httpx.post(f"{server.url}/v1/rollout", json=body,
                                                                         timeout=600)))
        worker.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait until both instances hold chunks mid-way
            inst = httpx.get(f"{server.url}/instances", timeout=10).json()["instances"]
            if all(i["inflight_chunks"] for i in inst):
                break
            time.sleep(0.05)
        time.sleep(0.3)
        victim = _instance_pids(server)[0]
        cmd = victim.cmdline()
        victim_url = f"http://127.0.0.1:{cmd[cmd.index('--port') + 1]}"
        urls = [i["url"] for i in httpx.get(f"{server.url}/instances", timeout=10).json()["instances"]]
        victim_index = urls.index(victim_url)
        for p in [victim] + victim.children(recursive=True):
            p.kill()
        worker.join(600)
        r = box["r"]
        assert r.status_code == 200, r.text
        samples = r.json()["samples"]
        assert len(samples) == 24 and len({(s["prompt_index"], s["index"]) for s in samples}) == 24
        with httpx.Client(timeout=600) as http:
            ref = [http.post(f"{plain_url}/generate", json={"input_ids": p, "sampling_params": {
                "max_new_tokens": 240, "temperature": 0, "ignore_eos": True}}).json()["output_ids"]
                   for p in prompts]
        for s in samples:
            assert s["finish_reason"] == "length" and s["error"] is None
            assert len(s["output_ids"]) == 240 == len(s["logprobs"])  # nothing lost, nothing twice
            assert s["output_ids"] == ref[s["prompt_index"]]  # resumed from the last completed chunk
        moved = [s for s in samples if s["chunks"][0]["instance"] == victim_index
                 and s["chunks"][-1]["instance"] != victim_index]
        assert moved, "no sample was moved off the killed instance"
        health = httpx.get(f"{server.url}/health").json()
        assert health["healthy_instances"] == 1
    finally:
        assert stop_seer(server) == []
