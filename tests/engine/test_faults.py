"""An instance dies mid-rollout: its chunks move to the survivor, every sample completes with the
tokens of an undisturbed run, and the moved samples load their context from the global KV pool. An
instance that stops answering (SIGSTOP) has its chunks sent elsewhere, and takes work again once it
answers."""

import time
from pathlib import Path

import httpx

from conftest import BackgroundRollout, start_seer, stop_seer, wait_server
from kill_rollout import MAX_TOKENS, PROMPTS, kill_mid_rollout


def test_killing_one_of_two_instances_loses_no_sample(tiny_model, plain_url, tmp_path):
    server = start_seer(tiny_model, tmp_path, "--num-instances", "2", "--dtype", "float32",
                        "--kv-pool", "file", "--scheduler", "context", "--chunk-size", "32")
    try:
        wait_server(server)
        pool_dir = Path(httpx.get(f"{server.url}/kv_pool", timeout=10).json()["directory"])
        result = kill_mid_rollout(server)
        samples = result.samples
        assert len(samples) == 24 and len({(s["prompt_index"], s["index"]) for s in samples}) == 24
        with httpx.Client(timeout=600) as http:
            ref = [out["output_ids"] for out in http.post(f"{plain_url}/generate", json={
                "input_ids": PROMPTS, "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0,
                                                          "ignore_eos": True}}).json()]
        for s in samples:
            assert s["finish_reason"] == "length" and s["error"] is None
            assert len(s["output_ids"]) == MAX_TOKENS == len(s["logprobs"])  # nothing lost, nothing twice
            assert s["output_ids"] == ref[s["prompt_index"]]  # resumed from the last completed chunk
        assert result.moved, "no sample was moved off the killed instance"
        # Every finished chunk's pages were in the pool before its answer left the dead instance:
        # the moved samples load (almost) all of their context's whole pages instead of recomputing.
        print(f"moved {len(result.moved)} samples: {result.pool_pages} of {result.kv_pages} KV pages from the pool")
        assert result.pool_pages >= 0.9 * result.kv_pages, (result.pool_pages, result.kv_pages)
        # ... because each instance loaded the pool's page-hash extension while it started: built lazily,
        # its first lookup compiled it for longer than HiCache's prefetch deadline.
        for log in server.log_dir.glob("instance-*.log"):
            assert "KV pool: page-hash extension ready" in log.read_text(), log
        # The dead instance left no torn page in the global KV pool: every page file has one size.
        sizes = {f.stat().st_size for f in pool_dir.glob("*.bin")}
        assert len(sizes) == 1, sizes
        health = httpx.get(f"{server.url}/health").json()
        assert health["healthy_instances"] == 1
    finally:
        assert stop_seer(server) == []


def test_a_stopped_instance_has_its_chunks_sent_elsewhere_and_rejoins(tiny_model, plain_url, tmp_path):
    from seer_sglang.benchmarking.kill import chunk_tokens_done, first_instance

    server = start_seer(tiny_model, tmp_path, "--num-instances", "2", "--dtype", "float32", "--kv-pool", "none",
                        "--scheduler", "context", "--chunk-size", "32", "--instance-down-s", "3")
    stopped = []
    try:
        wait_server(server)
        body = {"prompts": [{"input_ids": p} for p in PROMPTS], "n": 1, "max_tokens": MAX_TOKENS,
                "temperature": 0, "ignore_eos": True}
        run = BackgroundRollout(server.url, body)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            inst = httpx.get(f"{server.url}/instances", timeout=10).json()["instances"]
            if all(i["inflight_chunks"] for i in inst) and chunk_tokens_done(server.url) >= 40 * len(PROMPTS):
                break
            time.sleep(0.05)
        victim, index = first_instance(server.url, server.proc.pid)
        stopped = [victim] + victim.children(recursive=True)
        for p in stopped:  # hung, not dead: its connections stay open and never answer
            p.suspend()
        r = run.wait()
        assert r.status_code == 200, r.text
        samples = r.json()["samples"]
        with httpx.Client(timeout=600) as http:
            ref = [out["output_ids"] for out in http.post(f"{plain_url}/generate", json={
                "input_ids": PROMPTS, "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0,
                                                          "ignore_eos": True}}).json()]
        assert len(samples) == 24
        for s in samples:
            assert s["finish_reason"] == "length" and s["output_ids"] == ref[s["prompt_index"]]
        assert "no answer for 3 s" in server.log_path.read_text()  # its chunks were given up, not waited on
        for p in stopped:
            p.resume()
        stopped = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            inst = httpx.get(f"{server.url}/instances", timeout=10).json()["instances"]
            if inst[index]["healthy"]:
                break
            time.sleep(0.5)
        assert inst[index]["healthy"], inst  # answers again: readmitted
    finally:
        for p in stopped:
            p.resume()
        assert stop_seer(server) == []
