"""Shared fixtures: one plain SGLang instance and one seer_sglang server (2 instances), both on the
tiny local model, started once per session and in parallel."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from seer_sglang.launch.instances import (InstanceProcess, InstanceSpec, cpu_threads_per_instance, free_port,
                                            has_cuda, start_instance, stop_instances, wait_healthy)
# One polling loop for the suite: tests that act on a server while it works wait for the work's progress,
# not for a time (the tiny model's speed differs from one machine, and one load, to another).
from seer_sglang.launch.waiting import wait_until  # noqa: F401 (the tests import it from here)
# The one way tests and benchmarks start a seer server (the tests import these from here).
from seer_sglang.launch.seer_process import (STARTUP_TIMEOUT_S, SeerServer, running_seer, start_seer,  # noqa: F401
                                             stop_seer, wait_seer)
from seer_sglang.models import prepare

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_model() -> str:
    return str(prepare("tiny"))


def start_healthy(spec: InstanceSpec) -> InstanceProcess:
    """One SGLang instance, healthy; stopped again if it never gets there."""
    return start_all_healthy([spec])[0]


def start_all_healthy(specs: list[InstanceSpec]) -> list[InstanceProcess]:
    """SGLang instances started side by side (their start-up overlaps), all healthy; all stopped again
    if one never gets there."""
    instances = []
    try:
        for spec in specs:
            instances.append(start_instance(spec))
        wait_healthy(instances, timeout_s=STARTUP_TIMEOUT_S, progress=False)
    except BaseException:
        stop_instances(instances)
        raise
    return instances




class BackgroundRollout:
    """``POST /v1/rollout`` in a thread, for tests that act on the server while it runs."""

    def __init__(self, url: str, body: dict, timeout_s: float = 600):
        self.response: httpx.Response | None = None
        self._thread = threading.Thread(target=self._run, args=(url, body, timeout_s))
        self._thread.start()

    def _run(self, url: str, body: dict, timeout_s: float) -> None:
        self.response = httpx.post(f"{url}/v1/rollout", json=body, timeout=timeout_s)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait(self, timeout_s: float = 600) -> httpx.Response:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"the rollout did not end within {timeout_s} s"
        return self.response


@contextlib.contextmanager
def seer_beside_plain(model: str, logs: Path, sglang_args: list[str], seer_args: tuple[str, ...] = ()):
    """A seer server with 2 instances and a plain SGLang instance (no plugin) of the same model and
    SGLang arguments, started side by side: (seer, plain), stopped again on the way out. ``seer_args``:
    seer's own flags."""
    seer = start_seer(model, logs / "seer", "--num-instances", "2", *seer_args, *sglang_args)
    plain = None
    try:
        plain = start_healthy(InstanceSpec(model_path=model, port=free_port(), cpu=not has_cuda(), with_plugin=False,
                                           sglang_args=[*sglang_args, "--sleep-on-idle"], log_path=logs / "plain.log",
                                           cpu_threads=cpu_threads_per_instance(3)))
        wait_seer(seer)
        yield seer, plain
    finally:
        stop_beside(seer, [plain] if plain is not None else [])


def stop_beside(seer: SeerServer, instances: list[InstanceProcess]) -> None:
    """Stop a seer server and plain instances at once: each waits out its own shutdown, so the waits
    overlap instead of adding up."""
    stopping = threading.Thread(target=stop_instances, args=(instances,))
    stopping.start()
    try:
        stop_seer(seer)
    finally:
        stopping.join()


def png_data_url(seed: int, size=(64, 48)) -> str:
    """A random image as a data URL, as trainers send images in ``image_data``."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def chunked(url: str, chunk_size: int, **settings) -> None:
    """The context policy in chunks of exactly ``chunk_size`` (``kv_headroom=0.001``: one chunk per
    instance at a time, so chunks move between instances)."""
    body = {"name": "context", "chunk_size": chunk_size, "align_to_pages": False, "kv_headroom": 0.95,
            "whole_tail": False, **settings}
    r = httpx.post(f"{url}/scheduler", json=body, timeout=30)
    assert r.status_code == 200, r.text


def _counter(url: str, name: str, **labels) -> float:
    """A seer server's Prometheus counter ``name``, summed over the samples whose labels include ``labels``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) if f.name == name
               for s in f.samples if s.name.endswith("_total") and labels.items() <= s.labels.items())


def chunks_returned(url: str) -> float:
    """Chunks the instances have returned to a seer server (its Prometheus counter)."""
    return _counter(url, "seer_chunks")


def generated_tokens(url: str) -> float:
    """Tokens of the samples a seer server has finished (its Prometheus counter)."""
    return _counter(url, "seer_generation_tokens")


def moved_rollout(url: str, body: dict, chunk_size: int) -> list[dict]:
    """A ``/v1/rollout`` in chunks of ``chunk_size`` whose samples move between two instances: each
    instance runs one chunk at a time, and once instance 0 has returned its first chunk it leaves (a
    chunk it runs finishes there), so the sample of that chunk goes on on instance 1; it joins again
    afterwards. Its samples, at least one of them moved (every sample needs more than two chunks)."""
    chunked(url, chunk_size, kv_headroom=0.001)
    first = httpx.get(f"{url}/instances", timeout=10).json()["instances"][0]["url"]
    start = _counter(url, "seer_chunks", instance="0")
    try:
        run = BackgroundRollout(url, body)
        wait_until(lambda: _counter(url, "seer_chunks", instance="0") > start, 300, 0.02, "instance 0's first chunk")
        assert httpx.post(f"{url}/remove_worker", params={"url": first}, timeout=30).status_code == 200
        r = run.wait(600)
    finally:
        httpx.post(f"{url}/add_worker", params={"url": first}, timeout=60)
        chunked(url, chunk_size)
    assert r.status_code == 200, r.text
    samples = r.json()["samples"]
    assert any(len({c["instance"] for c in s["chunks"]}) > 1 for s in samples), "no sample moved"
    return samples


LOOPBACK_ADDRESSES = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def listening_under(pid: int) -> dict[int, list[tuple[str, int]]]:
    """The TCP ports a process and all its descendants listen on: pid -> sorted (address, port)."""
    tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    pids = {p.pid for p in tree}
    out: dict[int, list] = {p: [] for p in pids}
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            out[c.pid].append((c.laddr.ip, c.laddr.port))
    return {p: sorted(v) for p, v in out.items()}


@dataclass
class Servers:
    seer: SeerServer
    plain: InstanceProcess


@pytest.fixture(scope="session")
def servers(tiny_model: str, tmp_path_factory) -> Servers:
    """Seer (2 instances with the plugin) and plain SGLang (no plugin), started side by side."""
    logs = tmp_path_factory.mktemp("logs")
    # float32: exact token equality across different batch and prefill shapes (bf16 can flip near-ties).
    # --sleep-on-idle: an idle SGLang scheduler otherwise spins a whole core for the entire session,
    # one of the two the other tests' instances share (requests wake it at once).
    plain_spec = InstanceSpec(model_path=tiny_model, port=free_port(), cpu=not has_cuda(), with_plugin=False,
                              sglang_args=["--dtype", "float32", "--sleep-on-idle"], log_path=logs / "plain.log",
                              cpu_threads=cpu_threads_per_instance(3))
    plain = start_instance(plain_spec)
    # --kv-pool file: the tests look at pool pages (16 tokens); the default (auto) leaves the tiny
    # model without a pool, since it recomputes a page faster than a page file opens.
    # --enable-metrics (SGLang's flag, off by default): the tests read the instances' metrics re-exported.
    seer = start_seer(tiny_model, logs / "seer", "--num-instances", "2", "--dtype", "float32", "--kv-pool", "file",
                      "--enable-metrics")
    try:
        wait_healthy([plain], timeout_s=STARTUP_TIMEOUT_S, progress=False)
        wait_seer(seer)
    except BaseException:
        stop_beside(seer, [plain])
        raise
    yield Servers(seer, plain)
    stop_beside(seer, [plain])


@pytest.fixture(scope="session")
def seer_url(servers: Servers) -> str:
    return servers.seer.url


@pytest.fixture(scope="session")
def plain_url(servers: Servers) -> str:
    return servers.plain.url


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)  # stable: the rest keep their order
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]  # the marker, not the folder
    if not gpu or has_cuda():  # has_cuda runs nvidia-smi: only asked when a GPU test was collected
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in gpu:
        item.add_marker(skip_gpu)
