"""Tensor weight updates with CUDA IPC handles, as veRL sends them from a colocated trainer (skipped
without a GPU).

Each receiving rank gets the handles of tensors on its own GPU: entry i of ``serialized_named_tensors``
is serialized from ``cuda:i``, and the frontend must give it to the instance on that GPU (instance i,
TP 1). A handle opened on the wrong GPU fails or loads another device's memory. The CPU twin of this
test (``tests/engine/test_weight_sync.py``) checks the same mapping with host shared memory.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
import torch
from seer_sglang.launch.waiting import ProcessExited, wait_healthy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PROBE = {"input_ids": [1, 17, 42, 99, 7], "sampling_params": {"temperature": 0, "max_new_tokens": 8}}


@pytest.fixture(scope="module")
def gpu_server(tiny_model, tmp_path_factory):
    from seer_sglang.launch.instances import free_port

    gpus = torch.cuda.device_count()
    port, logs = free_port(), tmp_path_factory.mktemp("ipc")
    proc = subprocess.Popen([sys.executable, "-m", "seer_sglang.launch_server", "--model-path", tiny_model,
                             "--port", str(port), "--num-instances", str(gpus), "--draft", "none",
                             "--kv-pool", "none", "--log-dir", str(logs), "--mem-fraction-static", "0.3"],
                            stdout=open(logs / "launch.log", "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, 900, process=proc, interval=1.0)
    except (TimeoutError, ProcessExited) as e:
        proc.terminate()
        pytest.fail(f"seer did not start on the GPU ({e}); see {logs}")
    yield url, gpus
    proc.terminate()
    proc.wait(120)


def _outputs(url: str) -> list[list[int]]:
    urls = [i["url"] for i in httpx.get(f"{url}/instances", timeout=30).json()["instances"]]
    return [httpx.post(f"{u}/generate", json=PROBE, timeout=120).json()["output_ids"] for u in urls]


def test_ipc_handles_reach_the_instance_on_their_gpu(gpu_server, tiny_model):
    from safetensors.torch import load_file
    from sglang.srt.utils import MultiprocessingSerializer

    url, gpus = gpu_server
    weights = load_file(os.path.join(tiny_model, "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    noisy = {k: (v.float() + 0.05 * torch.randn(v.shape, generator=g)).to(v.dtype) for k, v in weights.items()}
    base = _outputs(url)

    def send(named: dict, version: str) -> None:
        # one entry per GPU, holding IPC handles of tensors on that GPU; they stay alive until loaded
        on_gpu = [[(k, v.to(f"cuda:{i}")) for k, v in named.items()] for i in range(gpus)]
        body = {"serialized_named_tensors": [MultiprocessingSerializer.serialize(t, output_str=True) for t in on_gpu],
                "weight_version": version}
        r = httpx.post(f"{url}/update_weights_from_tensor", timeout=300, json=body)
        assert r.status_code == 200, r.text
        torch.cuda.synchronize()

    send(noisy, "ipc-noisy")
    changed = _outputs(url)
    assert all(c != b for c, b in zip(changed, base)) and len(set(map(tuple, changed))) == 1
    send(weights, "ipc-orig")
    assert _outputs(url) == base
