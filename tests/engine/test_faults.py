"""An instance dies mid-rollout: its chunks move to the survivor and every sample completes."""

import threading
import time
from pathlib import Path

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
        # Distinct prompts of 40 tokens: no sample can find another's KV, so a moved continuation's
        # context can only come from the pool (or be recomputed).
        prompts = [[5 + i, 17, 300 + 7 * i, 42, 1000 + i] * 8 for i in range(24)]
        body = {"prompts": [{"input_ids": p} for p in prompts], "n": 1, "max_tokens": 240, "temperature": 0,
                "ignore_eos": True}
        box = {}
        worker = threading.Thread(target=lambda: box.update(r=httpx.post(f"{server.url}/v1/rollout", json=body,
                                                                         timeout=600)))
        worker.start()
        deadline = time.monotonic() + 300
        # Wait until both instances hold chunks and finished chunks have put decoded pages in the
        # pool: more page files than the prompts' own (2 whole pages of 16 per 40-token prompt).
        pool_dir = Path(httpx.get(f"{server.url}/kv_pool", timeout=10).json()["directory"])
        while time.monotonic() < deadline:
            inst = httpx.get(f"{server.url}/instances", timeout=10).json()["instances"]
            pages = len(list(pool_dir.glob("*.bin")))
            if all(i["inflight_chunks"] for i in inst) and pages >= 24 * 2 + 24:
                break
            time.sleep(0.05)
        time.sleep(0.5)
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
            ref = [out["output_ids"] for out in http.post(f"{plain_url}/generate", json={
                "input_ids": prompts, "sampling_params": {"max_new_tokens": 240, "temperature": 0,
                                                          "ignore_eos": True}}).json()]
        for s in samples:
            assert s["finish_reason"] == "length" and s["error"] is None
            assert len(s["output_ids"]) == 240 == len(s["logprobs"])  # nothing lost, nothing twice
            assert s["output_ids"] == ref[s["prompt_index"]]  # resumed from the last completed chunk
        moved = [s for s in samples if s["chunks"][0]["instance"] == victim_index
                 and s["chunks"][-1]["instance"] != victim_index]
        assert moved, "no sample was moved off the killed instance"
        # The dead instance left no torn page in the global KV pool: every page file has one size.
        sizes = {f.stat().st_size for f in pool_dir.glob("*.bin")}
        assert len(sizes) == 1, sizes
        health = httpx.get(f"{server.url}/health").json()
        assert health["healthy_instances"] == 1
    finally:
        assert stop_seer(server) == []
