"""A real SGLang instance with emulated steps: each forward step lasts what the profile gives."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from conftest import start_healthy
from seer_sglang.config import PluginConfig
from seer_sglang.launch.instances import (InstanceSpec, cpu_threads_per_instance, free_port, has_cuda,
                                            stop_instances)

# A slow, simple profile: 60 ms per decode step plus 1 ms per sequence; prefill 0.1 ms per token.
PROFILE = {"name": "slow-test", "decode_base_s": 0.06, "decode_per_seq_s": 0.001, "decode_per_kv_token_s": 0.0,
           "prefill_per_token_s": 1e-4, "capacity_tokens": 4096, "source": "test"}


def test_emulated_instance_pads_every_step_and_reports_it(tiny_model, tmp_path):
    profile = tmp_path / "slow.json"
    profile.write_text(json.dumps(PROFILE))
    log = tmp_path / "steps"
    env = PluginConfig(emulate=str(profile), emulate_time_scale=2.0, emulate_step_log=str(log)).to_env()
    inst = start_healthy(InstanceSpec(model_path=tiny_model, port=free_port(), cpu=not has_cuda(),
                                      sglang_args=["--max-total-tokens", "4096"], log_path=tmp_path / "inst.log",
                                      cpu_threads=cpu_threads_per_instance(2), extra_env=env))
    try:
        with httpx.Client(timeout=300) as http:
            before = http.get(f"{inst.url}/server_info").json()["internal_states"][0]["seer_emulation"]
            start = time.perf_counter()
            out = http.post(f"{inst.url}/generate", json={"input_ids": [[5, 6, 7, 8]] * 4, "rid": [f"r{i}" for i in range(4)], "sampling_params": {
                "max_new_tokens": 20, "temperature": 0, "ignore_eos": True}}).json()
            wall = time.perf_counter() - start
            after = http.get(f"{inst.url}/server_info").json()["internal_states"][0]["seer_emulation"]
    finally:
        stop_instances([inst])
    assert all(len(o["output_ids"]) == 20 for o in out)
    steps = after["steps"] - before["steps"]
    modelled = after["model_s"] - before["model_s"]
    # 4 requests x 20 tokens: a prefill and 19 decode steps at least, each 2 x (60 ms + 4 ms)
    assert steps >= 20 and modelled >= 19 * 2 * 0.064
    assert wall >= modelled and after["overruns"] - before["overruns"] <= 0.05 * steps
    # the counters run from startup (whose first steps, compiling, overrun): a run takes differences
    assert after["profile"] == "slow-test@len1x2" and after["overrun_share"] == after["overruns"] / after["steps"]
    # --emulate-step-log: every step of the request's batch, with its modelled time, and each request
    # reaching the scheduler's queue before its first step
    (path,) = tmp_path.glob("steps.*")
    logged = [json.loads(line) for line in path.read_text().splitlines()]
    rids = {"r0", "r1", "r2", "r3"}
    steps_logged = [s for s in logged if s["kind"] != "arrive"]
    ours = [s for s in steps_logged if set(s["rids"]) & rids]
    assert len(steps_logged) == after["steps"] and len(ours) >= 20 and ours[0]["kind"] == "prefill"
    assert sum(s["model_s"] for s in ours) == pytest.approx(modelled, rel=0.05)
    arrived = {s["rids"][0]: s["t"] for s in logged if s["kind"] == "arrive" and s["rids"][0] in rids}
    assert set(arrived) == rids and max(arrived.values()) <= ours[0]["t"]
    # a decode step has each request's length before it: the next step's is one token more
    decodes = [s for s in ours if s["kind"] == "decode" and s["rids"] == ours[1]["rids"]]
    assert [d["lens"][0] for d in decodes[:3]] == [decodes[0]["lens"][0] + k for k in range(3)]
