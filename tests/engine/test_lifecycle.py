"""Start-up, attach mode, no-instance 503, and clean shutdown with no orphan process."""

import signal
import threading
import time

import httpx
import openai

from conftest import BackgroundRollout, start_seer, stop_seer, wait_seer
from seer_sglang.launch.instances import free_port
from seer_sglang.launch.waiting import wait_until


def test_sigterm_mid_rollout_answers_503_and_leaves_no_process(tiny_model, tmp_path):
    """SIGTERM while a rollout and a streamed chat run: both end at once with a 503 that says the server
    is shutting down (not a dropped connection), and no process outlives the launcher."""
    server = start_seer(tiny_model, tmp_path, "--num-instances", "1")
    streamed: list[str] = []
    try:
        wait_seer(server)
        family = server.descendants()
        assert len(family) >= 3  # SGLang server + scheduler + detokenizer
        # The default pool (--kv-pool auto): a single instance has nothing to move, so the cost model
        # leaves the pool off and says why, in /kv_pool and in the log.
        pool = httpx.get(f"{server.url}/kv_pool", timeout=10).json()
        assert pool["kind"] == "none" and "0 moves per sample" in pool["auto"], pool
        assert "--kv-pool auto" in server.log_path.read_text()
        run = BackgroundRollout(server.url, {"prompts": ["bye"], "n": 2, "max_tokens": 3000, "ignore_eos": True})

        def chat():
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3000, "stream": True,
                    "ignore_eos": True}
            with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as r:
                streamed.extend(line for line in r.iter_lines() if line.startswith("data:"))

        chatting = threading.Thread(target=chat)
        chatting.start()
        wait_until(lambda: httpx.get(f"{server.url}/instances", timeout=10).json()["instances"][0]["inflight_chunks"] >= 3,
                   120, 0.05, "three requests running")
        time.sleep(0.5)
    finally:
        leftovers = stop_seer(server, signal.SIGTERM)
    assert server.proc.returncode is not None
    assert leftovers == [], f"orphans: {[p.pid for p in leftovers]}"
    assert "stopping 1 SGLang instance(s)" in server.log_path.read_text()
    r = run.wait(timeout_s=30)
    assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down", r.text
    chatting.join(timeout=30)
    assert streamed[-1] == "data: [DONE]" and "shutting down" in streamed[-2], streamed[-3:]


def test_attach_to_running_instance_and_503_when_none_is_healthy(tiny_model, plain_url, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    attached = start_seer(tiny_model, tmp_path / "a", "--instance-urls", plain_url)
    down = start_seer(tiny_model, tmp_path / "b", "--instance-urls", dead)
    try:
        wait_seer(attached)
        client = openai.OpenAI(base_url=f"{attached.url}/v1", api_key="none", max_retries=0)
        out = client.completions.create(model=tiny_model, prompt="attached", max_tokens=4, n=2)
        assert len(out.choices) == 2
        # The frontend of the dead instance is up but has nothing to serve with.
        wait_seer(down, 503, timeout_s=120)
        r = httpx.post(f"{down.url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=30)
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_healthy_instance"
        r = httpx.post(f"{down.url}/v1/rollout", json={"prompts": ["x"], "max_tokens": 2}, timeout=30)
        assert r.status_code == 503
    finally:
        assert stop_seer(attached) == [] and stop_seer(down) == []
    # attaching never stops the instance it did not start
    assert httpx.get(f"{plain_url}/health", timeout=10).status_code == 200
