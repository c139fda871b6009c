"""A weight update in the middle of a rollout: every sample comes from one weight version, and its
tokens are those of plain SGLang on that version. The second version is the tiny model with other
weights, so a sample that mixed them, or loaded KV computed by the old ones, would show it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from conftest import BackgroundRollout, start_seer, stop_seer, wait_seer, wait_until
from seer_sglang.benchmarking.kill import chunk_tokens_done

CHUNK = 16
MAX_TOKENS = 320


@pytest.fixture(scope="module")
def other_weights(tiny_model, tmp_path_factory) -> str:
    """The tiny model with every weight moved by seeded noise: same shapes and tokenizer, other outputs."""
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("tiny-b")
    for item in Path(tiny_model).iterdir():
        if item.is_file() and item.suffix != ".safetensors":
            shutil.copy(item, out / item.name)
    gen = torch.Generator().manual_seed(1)
    for shard in Path(tiny_model).glob("*.safetensors"):
        tensors = load_file(str(shard))
        moved = {name: (t.float() + 0.5 * t.float().std() * torch.randn(t.shape, generator=gen)).to(t.dtype)
                 for name, t in tensors.items()}
        save_file(moved, str(out / shard.name), metadata={"format": "pt"})
    return str(out)


def _greedy(url: str, prompts: list[list[int]], max_tokens: int = MAX_TOKENS) -> list[list[int]]:
    with httpx.Client(timeout=600) as http:
        return [http.post(f"{url}/generate", json={"input_ids": p, "sampling_params": {
            "max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True}}).json()["output_ids"] for p in prompts]


def _update(url: str, model_path: str, **extra) -> httpx.Response:
    r = httpx.post(f"{url}/update_weights_from_disk", json={"model_path": model_path, **extra}, timeout=600)
    assert r.status_code == 200, r.text
    return r


@pytest.mark.parametrize("via", ["frontend", "instances"])
def test_update_mid_rollout_gives_one_version_per_sample_with_that_versions_tokens(
        seer_url, plain_url, tiny_model, other_weights, via):
    """The update comes through the frontend, or straight to each instance (as a trainer that holds the
    instance URLs does): the frontend learns of the new version from the chunks' metadata alone."""
    prompts = [[(31 * p + 7 * i) % 1900 + 40 for i in range(24 + 3 * p)] for p in range(6)]
    old_tokens = _greedy(plain_url, prompts)
    _update(plain_url, other_weights, weight_version="plain-b")
    try:
        new_tokens = _greedy(plain_url, prompts)
    finally:
        _update(plain_url, tiny_model, weight_version="plain-a")
    assert all(a != b for a, b in zip(old_tokens, new_tokens))  # the two versions really differ

    before = httpx.get(f"{seer_url}/scheduler").json()
    httpx.post(f"{seer_url}/scheduler", json={"name": "context", "chunk_size": CHUNK}, timeout=30).raise_for_status()
    body = {"prompts": [{"input_ids": p} for p in prompts], "n": 2, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True}
    try:
        start = chunk_tokens_done(seer_url)
        run = BackgroundRollout(seer_url, body, timeout_s=900)
        # a fifth of the tokens back: the update lands while samples are part done
        wait_until(lambda: chunk_tokens_done(seer_url) - start >= 0.2 * 12 * MAX_TOKENS, 120, 0.05,
                   "a fifth of the rollout")
        if via == "frontend":  # it names the version
            update = _update(seer_url, other_weights)
            assert all(i["status"] == 200 for i in update.json()["instances"])
            new_version = update.headers["x-seer-weight-version"]
        else:  # one instance after the other: for a moment the two run different weights
            new_version = f"direct-{time.monotonic_ns()}"
            # SGLang refuses to flush a cache while requests run (the call then fails after loading the
            # weights); the plugin keys cached KV by weight version, so no flush is needed for correctness.
            for inst in httpx.get(f"{seer_url}/instances", timeout=10).json()["instances"]:
                answer = _update(inst["url"], other_weights, weight_version=new_version, flush_cache=False).json()
                assert answer["success"], answer
        r = run.wait(900)
    finally:
        httpx.post(f"{seer_url}/scheduler", json=before, timeout=30)
        _update(seer_url, tiny_model, weight_version="restored")
    assert r.status_code == 200, r.text
    data = r.json()
    samples = data["samples"]
    assert len(samples) == 12 and data["summary"]["failed"] == 0
    assert data["summary"]["regenerations"] > 0, data["summary"]  # the update landed mid-sample
    assert new_version in data["summary"]["weight_versions"]  # samples done before the update keep the old one
    for s in samples:
        assert s["weight_versions"] is None, s["weight_versions"]  # never two versions in one sample
        assert {c["weight_version"] for c in s["chunks"][-(MAX_TOKENS // CHUNK):]} == {s["weight_version"]}
        want = new_tokens if s["weight_version"] == new_version else old_tokens
        assert s["output_ids"] == want[s["prompt_index"]], (s["rid"], s["weight_version"], s["regenerations"])
    assert any(s["weight_version"] == new_version for s in samples)


def test_mixed_weight_versions_continue_a_sample_and_report_each_tokens_version(
        tiny_model, plain_url, other_weights, tmp_path):
    """``--mixed-weight-versions`` (asynchronous RL with partial rollouts): a sample the update lands in
    is not generated again; it continues on the new weights, and reports which tokens each version
    made. Its old-version tokens are plain SGLang's on the old weights, and the rest are plain SGLang's
    continuation on the new weights from exactly that prefix."""
    prompts = [[(29 * p + 5 * i) % 1900 + 40 for i in range(20 + 2 * p)] for p in range(4)]
    max_tokens = 480  # long enough that the update lands while every sample is still running
    old_tokens = _greedy(plain_url, prompts, max_tokens)
    server = start_seer(tiny_model, tmp_path, "--num-instances", "2", "--dtype", "float32", "--kv-pool", "none",
                        "--scheduler", "context", "--chunk-size", str(CHUNK), "--mixed-weight-versions")
    try:
        wait_seer(server)
        body = {"prompts": [{"input_ids": p} for p in prompts], "n": 2, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": True}
        start = chunk_tokens_done(server.url)
        run = BackgroundRollout(server.url, body, timeout_s=900)
        wait_until(lambda: chunk_tokens_done(server.url) - start >= 0.1 * 8 * max_tokens, 120, 0.05,
                   "a tenth of the rollout")
        new_version = _update(server.url, other_weights).headers["x-seer-weight-version"]
        r = run.wait(900)
    finally:
        stop_seer(server)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["summary"]["regenerations"] == 0 and data["summary"]["failed"] == 0
    spanning = [s for s in data["samples"] if s["weight_versions"]]
    assert spanning, "the update landed between chunks of no sample"
    _update(plain_url, other_weights, weight_version="plain-b")
    try:
        with httpx.Client(timeout=600) as http:
            for s in spanning:
                (old, start, cut), (new, cut2, end) = s["weight_versions"]
                assert (start, cut, cut2, end) == (0, cut, cut, max_tokens) and new == new_version != old
                prompt, out = prompts[s["prompt_index"]], s["output_ids"]
                assert out[:cut] == old_tokens[s["prompt_index"]][:cut]
                rest = http.post(f"{plain_url}/generate", json={"input_ids": prompt + out[:cut], "sampling_params": {
                    "max_new_tokens": max_tokens - cut, "temperature": 0, "ignore_eos": True}}).json()["output_ids"]
                assert out[cut:] == rest, (s["rid"], cut)
    finally:
        _update(plain_url, tiny_model, weight_version="plain-a")
