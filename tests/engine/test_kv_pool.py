"""The global KV pool (``--kv-pool file``): a continuation on another instance loads its
prompt + generated KV from the pool, with the tokens of an unmoved run (float32)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import httpx
import pytest

from conftest import start_all_healthy, start_seer
from seer_sglang.frontend.kv_pool import FilePool
from seer_sglang.launch.waiting import wait_until

PAGE = 16


def _generate(url: str, ids: list[int], n: int) -> dict:
    r = httpx.post(f"{url}/generate", json={"input_ids": ids, "sampling_params": {
        "max_new_tokens": n, "temperature": 0, "ignore_eos": True}}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def _weight_version(url: str) -> str:
    """The weights an instance runs; the plugin keys every pool page by them."""
    return httpx.get(f"{url}/model_info", timeout=10).json()["weight_version"]


@pytest.fixture(scope="module")
def pool_info(seer_url: str) -> dict:
    info = httpx.get(f"{seer_url}/kv_pool", timeout=10).json()
    assert info["kind"] == "file" and Path(info["directory"]).is_dir(), info
    return info


@pytest.fixture(scope="module")
def instance_urls(seer_url: str) -> list[str]:
    urls = [i["url"] for i in httpx.get(f"{seer_url}/instances", timeout=10).json()["instances"]]
    assert len(urls) == 2
    return urls


def _wait_pooled(pool: FilePool, ids: list[int], want: int, url: str, timeout_s: float = 30.0) -> int:
    """The instance's write-through reaches the pool a few ms after it answers: wait for the pages
    (keyed by the weight version of the instance at ``url``)."""
    version = _weight_version(url)
    try:
        wait_until(lambda: pool.pooled_tokens(ids, version) >= want, timeout_s, 0.05, f"{want} pooled tokens")
    except TimeoutError:
        pass  # the caller asserts on the count, which names what is missing
    return pool.pooled_tokens(ids, version)


def test_request_moved_between_instances_loads_its_kv_from_the_pool(seer_url, plain_url, instance_urls, pool_info,
                                                                    tiny_model):
    a, b = instance_urls
    rng = random.Random(7)
    prompt = [rng.randrange(5, 1000) for _ in range(300)]
    first = _generate(a, prompt, 64)["output_ids"]
    context = prompt + first
    pool = FilePool(pool_info["directory"], tiny_model, pool_info["page_size"], 1.0)
    pooled = _wait_pooled(pool, context, len(context) - len(context) % PAGE, a)
    assert pooled >= len(context) - PAGE, f"pool holds {pooled} of {len(context)} tokens"

    moved = _generate(b, context, 32)
    details = moved["meta_info"].get("cached_tokens_details") or {}
    assert details.get("storage", 0) >= len(context) - PAGE, moved["meta_info"]

    unmoved = _generate(plain_url, prompt, 96)["output_ids"]
    assert first + moved["output_ids"] == unmoved


def test_a_finished_request_has_its_pages_in_the_pool_when_it_answers(instance_urls, pool_info, tiny_model):
    """The instance answers only once the pool holds every whole page of the KV it kept (all context
    tokens but the last): checked the moment each answer arrives, without waiting."""
    a, _ = instance_urls
    pool = FilePool(pool_info["directory"], tiny_model, pool_info["page_size"], 1.0)
    version = _weight_version(a)
    rng = random.Random(17)
    for n in (40, 57, 96):
        prompt = [rng.randrange(5, 1500) for _ in range(150)]
        context = prompt + _generate(a, prompt, n)["output_ids"]
        kept = len(context) - 1
        assert pool.pooled_tokens(context, version) >= kept - kept % PAGE, (n, len(context))


def test_rollout_reports_kv_sources_and_moves_are_exact(seer_url, plain_url):
    """Divided rollout with small chunks on the pool: results carry per-chunk sources, a rollout total,
    /metrics counts them, and the tokens equal plain SGLang's."""
    httpx.post(f"{seer_url}/scheduler", json={"name": "divided", "chunk_size": 16}, timeout=10).raise_for_status()
    try:
        prompts = [[11 + p, 23, 57 + p, 99, 5 + p] * 8 for p in range(4)]
        r = httpx.post(f"{seer_url}/v1/rollout", json={
            "prompts": [{"input_ids": p} for p in prompts], "n": 4, "max_tokens": 80, "temperature": 0,
            "ignore_eos": True}, timeout=600)
        assert r.status_code == 200, r.text
        body = r.json()
    finally:
        httpx.post(f"{seer_url}/scheduler", json={"name": "context"}, timeout=10)
    kv = body["summary"]["kv"]
    assert kv["continuations"] >= 16 * 4
    for key in ("device", "host", "pool", "recomputed", "reprefill_tokens", "moves", "pool_saved_s"):
        assert key in kv
    for sample in body["samples"]:
        for chunk in sample["chunks"]:
            assert set(chunk["kv"]) == {"device", "host", "pool", "recomputed"}
    metrics = httpx.get(f"{seer_url}/metrics", timeout=10).text
    assert 'seer_kv_context_tokens_total{source="device"}' in metrics
    for i, p in enumerate(prompts):
        want = _generate(plain_url, p, 80)["output_ids"]
        for sample in body["samples"]:
            if sample["prompt_index"] == i:
                assert sample["output_ids"] == want


def test_pages_of_earlier_weights_are_never_loaded(instance_urls, pool_info, tiny_model):
    """Pages written before a weight update are keyed by the old version: after the update (straight at
    the instances, no cache flush) a continuation finds none of them on the device, in the host tier
    or in the pool, and the pages of the new version are found again."""
    a, b = instance_urls
    prompt = [(53 * i) % 1500 + 30 for i in range(260)]
    first = _generate(a, prompt, 48)["output_ids"]
    context = prompt + first
    pool = FilePool(pool_info["directory"], tiny_model, pool_info["page_size"], 1.0)
    assert _wait_pooled(pool, context, len(context) - PAGE, a) >= len(context) - PAGE
    assert _generate(a, context, 4)["meta_info"]["cached_tokens"] >= len(context) - PAGE  # a hit, before
    version = f"test-{random.randrange(1 << 30)}"
    for url in (a, b):
        r = httpx.post(f"{url}/update_weights_from_disk", timeout=300, json={
            "model_path": tiny_model, "weight_version": version, "flush_cache": False})
        assert r.status_code == 200, r.text
    moved = _generate(b, context, 4)["meta_info"]  # the pool holds only pages of the old weights
    assert moved["weight_version"] == version and moved["cached_tokens"] == 0, moved
    assert _wait_pooled(pool, context, len(context) - PAGE, b) >= len(context) - PAGE  # B wrote new ones
    again = _generate(a, context, 4)["meta_info"]
    details = again.get("cached_tokens_details") or {}
    assert details.get("device", 0) == 0, again  # A's own device pages are of the old weights
    assert again["cached_tokens"] >= len(context) - PAGE, again  # ... and B's new pages serve it


def test_pool_down_falls_back_to_recompute(seer_url, plain_url, instance_urls, pool_info, tiny_model):
    """With the pool's directory gone (replaced by a file), moves recompute: no error, same tokens."""
    a, b = instance_urls
    directory = Path(pool_info["directory"])
    saved = directory.with_name(directory.name + ".saved")
    directory.rename(saved)
    directory.write_text("not a directory")
    try:
        prompt = [rng_token for rng_token in range(40, 240)]
        first = _generate(a, prompt, 32)["output_ids"]
        moved = _generate(b, prompt + first, 32)
        assert (moved["meta_info"].get("cached_tokens_details") or {}).get("storage", 0) == 0
        assert first + moved["output_ids"] == _generate(plain_url, prompt, 64)["output_ids"]
    finally:
        directory.unlink()
        saved.rename(directory)
    # and the pool works again once it is back
    prompt = list(range(300, 500))
    first = _generate(a, prompt, 32)["output_ids"]
    pool = FilePool(directory, tiny_model, pool_info["page_size"], 1.0)
    assert _wait_pooled(pool, prompt + first, 224, a) >= 224


def test_a_full_or_read_only_pool_falls_back_to_recompute(seer_url, plain_url, instance_urls, pool_info, tiny_model):
    """The pool's filesystem full (a 64 KiB tmpfs over its directory, filled up), then read-only: moves
    recompute, with no error and the tokens of an unmoved run; once the directory is back, the pool
    serves again and both instances are healthy."""
    import subprocess

    a, b = instance_urls
    directory = Path(pool_info["directory"])
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(directory)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs over the pool here: {mounted.stderr.strip()}")
    try:
        with open(directory / "filler", "wb") as f, pytest.raises(OSError):
            f.write(b"\0" * (1 << 20))
            f.flush()
        for state in ("full", "read-only"):
            if state == "read-only":
                subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True)
            prompt = [(31 * i + len(state)) % 1700 + 20 for i in range(200)]
            first = _generate(a, prompt, 32)["output_ids"]
            moved = _generate(b, prompt + first, 32)
            assert (moved["meta_info"].get("cached_tokens_details") or {}).get("storage", 0) == 0, state
            assert first + moved["output_ids"] == _generate(plain_url, prompt, 64)["output_ids"], state
    finally:
        subprocess.run(["umount", str(directory)], check=False)
    prompt = list(range(600, 800))
    first = _generate(a, prompt, 32)["output_ids"]
    pool = FilePool(directory, tiny_model, pool_info["page_size"], 1.0)
    assert _wait_pooled(pool, prompt + first, 224, a) >= 224
    moved = _generate(b, prompt + first, 8)["meta_info"]
    assert (moved.get("cached_tokens_details") or {}).get("storage", 0) >= 224 - PAGE, moved
    health = httpx.get(f"{seer_url}/health", timeout=10).json()
    assert health["healthy_instances"] == 2, health


def test_instance_killed_mid_write_leaves_the_pool_whole(plain_url, tiny_model, tmp_path):
    """An instance is killed while it decodes and writes pages to a pool; another on the same pool
    loads the pages that were finished, with the tokens of plain SGLang. Half-written page files such a
    kill can leave are removed once stale, and never before."""
    import os
    import threading

    import psutil

    from seer_sglang.benchmarking.kill import kill_tree
    from seer_sglang.launch.instances import InstanceSpec, free_port, stop_instances
    from seer_sglang.launch.kv_pool import PoolSetup

    directory = tmp_path / "pool"
    directory.mkdir()
    config = PoolSetup(kind="file", directory=directory, page_size=PAGE)
    args = ["--dtype", "float32", *config.instance_args([])]

    def spec(name: str, *extra: str) -> InstanceSpec:
        return InstanceSpec(model_path=tiny_model, port=free_port(), sglang_args=[*args, *extra],
                            log_path=tmp_path / f"{name}.log", cpu_threads=1)

    rng = random.Random(11)
    prompt = [rng.randrange(5, 1000) for _ in range(320)]
    pool = FilePool(directory, tiny_model, PAGE, 1.0)
    # Both start side by side (their start-ups overlap); the second takes its first request after the
    # kill, and a storage backend reads the pool only for a request. --sleep-on-idle: it does not spin a
    # core while the first one decodes.
    doomed, restarted = start_all_healthy([spec("doomed"), spec("restarted", "--sleep-on-idle")])
    try:
        try:
            box: dict = {}
            worker = threading.Thread(target=lambda: box.update(r=httpx.post(f"{doomed.url}/generate", json={
                "input_ids": prompt,
                "sampling_params": {"max_new_tokens": 2000, "temperature": 0, "ignore_eos": True}}, timeout=600)))
            worker.start()
            assert _wait_pooled(pool, prompt, 320, doomed.url, timeout_s=120) == 320  # its prompt pages are written ...
            time.sleep(1.0)  # ... and it is decoding (and writing decoded pages) when it dies
            kill_tree(psutil.Process(doomed.popen.pid))
            worker.join(60)
        finally:
            stop_instances([doomed])
        assert "r" not in box or box["r"].status_code != 200  # it died mid-request
        sizes = {f.stat().st_size for f in directory.glob("*.bin")}
        assert len(sizes) == 1 and len(list(directory.glob("*.bin"))) > 320 // PAGE, sizes  # whole pages only

        stale, fresh = directory / ".0123456789abcdef.tmp", directory / ".fedcba9876543210.tmp"
        for path in (stale, fresh):  # what a kill between write and rename leaves; fresh = a write in flight
            path.write_bytes(b"\0" * 100)
        os.utime(stale, (time.time() - 3600, time.time() - 3600))
        assert pool.remove_stale_partials() == 1 and not stale.exists() and fresh.exists()

        out = _generate(restarted.url, prompt, 32)
    finally:
        stop_instances([restarted])
    assert (out["meta_info"].get("cached_tokens_details") or {}).get("storage", 0) >= 320 - PAGE
    assert out["output_ids"] == _generate(plain_url, prompt, 32)["output_ids"]


def test_a_pool_directory_holding_other_files_is_refused_at_start(tiny_model, tmp_path):
    """The pool evicts and clears files in its directory: the launcher will not take one that holds
    files it did not make, and stops before starting any instance."""

    foreign = tmp_path / "data"
    foreign.mkdir()
    (foreign / "checkpoint.bin").write_bytes(b"weights")
    server = start_seer(tiny_model, tmp_path / "logs", "--num-instances", "1", "--kv-pool", "file",
                        "--kv-pool-dir", str(foreign))
    assert server.proc.wait(timeout=300) == 1
    log = server.log_path.read_text()
    assert "holds files that are not a seer KV pool's (checkpoint.bin)" in log, log[-2000:]
    assert "starting 1 SGLang instance" not in log
    assert (foreign / "checkpoint.bin").read_bytes() == b"weights"
