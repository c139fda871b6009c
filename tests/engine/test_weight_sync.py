"""Weight sync and sleep mode through the frontend, on real instances (CPU): tensor updates from host
shared memory, NCCL-style distributed updates over gloo with each instance at its own rank, and memory
release/resume. Each update sends weights that change the greedy output, then the original ones."""

from __future__ import annotations

import os
import socket
import threading
import time

import httpx
import pytest
import torch
from safetensors.torch import load_file

PROBE = {"input_ids": [1, 17, 42, 99, 7], "sampling_params": {"temperature": 0, "max_new_tokens": 8}}


@pytest.fixture(scope="module")
def weights(tiny_model):
    return load_file(os.path.join(tiny_model, "model.safetensors"))


@pytest.fixture(scope="module")
def noisy(weights):
    g = torch.Generator().manual_seed(0)
    return {k: (v.float() + 0.05 * torch.randn(v.shape, generator=g)).to(v.dtype) for k, v in weights.items()}


def _outputs(seer_url: str) -> list[list[int]]:
    """The greedy output of every instance, asked directly."""
    urls = [i["url"] for i in httpx.get(f"{seer_url}/instances", timeout=30).json()["instances"]]
    return [httpx.post(f"{u}/generate", json=PROBE, timeout=120).json()["output_ids"] for u in urls]


def _versions(seer_url: str) -> list[str]:
    return [i["weight_version"] for i in httpx.get(f"{seer_url}/get_weight_version", timeout=30).json()["instances"]]


def test_update_weights_from_tensor(seer_url, weights, noisy):
    from sglang.srt.utils import MultiprocessingSerializer

    torch.multiprocessing.set_sharing_strategy("file_system")  # host tensors any process can open
    base = _outputs(seer_url)

    def send(named: dict, version: str) -> None:
        # veRL's body (one entry per receiving rank; 2 instances x TP 1 here, the same entry to each)
        payload = MultiprocessingSerializer.serialize(list(named.items()), output_str=True)
        r = httpx.post(f"{seer_url}/update_weights_from_tensor", timeout=300, json={
            "serialized_named_tensors": [payload], "load_format": None, "flush_cache": True,
            "weight_version": version})
        assert r.status_code == 200, r.text

    send(noisy, "tensor-noisy")
    changed = _outputs(seer_url)
    assert changed[0] == changed[1] != base[0] and _versions(seer_url) == ["tensor-noisy"] * 2
    send(weights, "tensor-orig")
    assert _outputs(seer_url) == base and _versions(seer_url) == ["tensor-orig"] * 2
    bad = httpx.post(f"{seer_url}/update_weights_from_tensor", timeout=60,
                     json={"serialized_named_tensors": ["a", "b", "c"]})
    assert bad.status_code == 400 and "receiving ranks" in bad.json()["error"]["message"]


def test_tensor_update_gives_each_instance_its_own_entry(seer_url, weights, noisy):
    """One entry per receiving rank, in instance order: instance i loads entry i (the IPC handles of its
    own GPU, in veRL's colocated layout), so here instance 0 takes other weights and instance 1 keeps its own."""
    from sglang.srt.utils import MultiprocessingSerializer

    torch.multiprocessing.set_sharing_strategy("file_system")
    base = _outputs(seer_url)
    # Fresh storages: a host tensor shared once before may have had its shared-memory file unlinked once
    # its receivers let go, and a second handle to it could not be opened.
    fresh = [{k: v.clone() for k, v in w.items()} for w in (noisy, weights)]
    entries = [MultiprocessingSerializer.serialize(list(w.items()), output_str=True) for w in fresh]
    r = httpx.post(f"{seer_url}/update_weights_from_tensor", timeout=300, json={
        "serialized_named_tensors": entries, "flush_cache": True, "weight_version": "per-rank"})
    assert r.status_code == 200, r.text
    first, second = _outputs(seer_url)
    assert first != base[0] and second == base[1]
    original = [(k, v.clone()) for k, v in weights.items()]  # alive until the instances have loaded it
    r = httpx.post(f"{seer_url}/update_weights_from_tensor", timeout=300, json={
        "serialized_named_tensors": [MultiprocessingSerializer.serialize(original, output_str=True)],
        "flush_cache": True, "weight_version": "per-rank-orig"})
    assert r.status_code == 200 and _outputs(seer_url) == base


def test_distributed_update_gives_each_instance_its_rank(seer_url, weights, noisy):
    """slime's and AReaL's NCCL path, over gloo on CPU: the trainer is rank 0 of a group of 3; the
    frontend puts instance i at rank_offset + i. Wrong ranks would never meet in the rendezvous."""
    from sglang.srt.utils.common import init_custom_process_group

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    answers: dict[str, httpx.Response] = {}

    def post(key: str, path: str, body: dict) -> threading.Thread:
        t = threading.Thread(target=lambda: answers.__setitem__(key, httpx.post(f"{seer_url}{path}", json=body,
                                                                               timeout=300)))
        t.start()
        return t

    base = _outputs(seer_url)
    t = post("init", "/init_weights_update_group", {"master_address": "127.0.0.1", "master_port": port,
                                                     "rank_offset": 1, "world_size": 3, "group_name": "seer-test",
                                                     "backend": "gloo"})
    group = init_custom_process_group(backend="gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=3,
                                      rank=0, group_name="seer-test")
    t.join()
    assert answers["init"].status_code == 200, answers["init"].text
    assert [i["body"]["success"] for i in answers["init"].json()["instances"]] == [True, True]

    def push(tensors: dict, version: str) -> None:
        names = list(tensors)
        t = post("update", "/update_weights_from_distributed", {
            "names": names, "dtypes": [str(tensors[n].dtype).replace("torch.", "") for n in names],
            "shapes": [list(tensors[n].shape) for n in names], "group_name": "seer-test",
            "flush_cache": False, "weight_version": version})
        for n in names:
            torch.distributed.broadcast(tensors[n], src=0, group=group)
        t.join()
        assert answers["update"].status_code == 200, answers["update"].text

    push(noisy, "nccl-noisy")
    assert _outputs(seer_url)[0] != base[0] and _versions(seer_url) == ["nccl-noisy"] * 2
    push(weights, "nccl-orig")
    assert _outputs(seer_url) == base
    done = httpx.post(f"{seer_url}/destroy_weights_update_group", json={"group_name": "seer-test"}, timeout=60)
    assert done.status_code == 200
    bad = httpx.post(f"{seer_url}/init_weights_update_group", timeout=60, json={
        "master_address": "127.0.0.1", "master_port": port, "rank_offset": 1, "world_size": 2, "group_name": "x"})
    assert bad.status_code == 400 and "world_size" in bad.json()["error"]["message"]


def test_sleep_mode_holds_work_until_the_kv_cache_is_back(seer_url):
    base = httpx.post(f"{seer_url}/generate", json=PROBE, timeout=120).json()["output_ids"]
    released = httpx.post(f"{seer_url}/release_memory_occupation", json={"tags": ["kv_cache", "weights"]}, timeout=300)
    assert released.status_code == 200, released.text
    answer: dict[str, httpx.Response] = {}
    t = threading.Thread(target=lambda: answer.setdefault("r", httpx.post(f"{seer_url}/generate", json=PROBE,
                                                                          timeout=300)))
    t.start()
    time.sleep(2.0)
    assert t.is_alive()  # queued in the frontend, not sent to an instance without memory
    assert httpx.get(f"{seer_url}/v1/loads", timeout=30).json()["seer"]["pending_samples"] == 1
    assert httpx.post(f"{seer_url}/resume_memory_occupation", json={"tags": ["weights"]}, timeout=300).status_code == 200
    time.sleep(0.5)
    assert t.is_alive()
    assert httpx.post(f"{seer_url}/resume_memory_occupation", json={"tags": ["kv_cache"]},
                      timeout=300).status_code == 200
    t.join(timeout=120)
    assert answer["r"].status_code == 200 and answer["r"].json()["output_ids"] == base
