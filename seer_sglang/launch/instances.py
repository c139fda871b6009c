"""Starts and stops K real ``sglang.launch_server`` processes (the mechanism; no policy here).

Each instance gets its own loopback port, log file and, on GPU, its own device. Processes are
stopped by the pids we started: SIGINT to the server's main pid, then SIGKILL for any descendant
still alive. On SIGINT uvicorn shuts the HTTP server down and SGLang's launcher stops its scheduler and
detokenizer at once (about 2 s); its SIGTERM path instead polls its request table every 5 s before
it drains, about 7 s for an idle instance, and a stopping deployment has nothing left to drain.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ..config import INSTANCES, LOOPBACK
from ..cpu_shims import launch_server as cpu_launch
from ..wire import SEEDED_SAMPLER
from .processes import die_with_parent, free_port, stop_processes
from .sglang_args import flag_value, has_flag
from .waiting import log_tail, wait_until

log = logging.getLogger("seer_sglang.instances")


def has_cuda() -> bool:
    if "CUDA_VISIBLE_DEVICES" in os.environ and not visible_gpus():
        return False  # started under an empty mask: no GPU is ours
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def cuda_device_count() -> int:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU"))


def visible_gpus(environ: dict[str, str] | None = None) -> list[str]:
    """The GPUs this process may use, named as a child's ``CUDA_VISIBLE_DEVICES`` must name them: the
    entries of the mask the launcher was started under (Ray and Slurm always set one), else every GPU
    ``nvidia-smi`` lists. CUDA stops at the first invalid entry, so does this."""
    mask = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if mask is None:
        return [str(i) for i in range(cuda_device_count())]
    gpus = []
    for entry in (e.strip() for e in mask.split(",")):
        if not entry or entry.startswith("-"):
            break
        gpus.append(entry)
    return gpus


def plan_gpus(visible: list[str], tp_size: int = 1, instances: int | None = None) -> list[str]:
    """Each instance's ``CUDA_VISIBLE_DEVICES``: ``tp_size`` GPUs of its own, in the order visible; by
    default as many instances as fit. Nothing outside ``visible`` is ever handed out."""
    if tp_size < 1:
        raise ValueError(f"--tp-size must be at least 1, got {tp_size}")
    k = instances or len(visible) // tp_size
    if k < 1 or k * tp_size > len(visible):
        raise ValueError(f"{instances or 1} instance(s) with --tp-size {tp_size} need {max(k, 1) * tp_size} "
                         f"GPU(s); {len(visible)} visible ({','.join(visible) or 'none'})")
    return [",".join(visible[i * tp_size:(i + 1) * tp_size]) for i in range(k)]


def tp_size(sglang_args: list[str]) -> int:
    return int(flag_value(sglang_args, "--tp-size") or flag_value(sglang_args, "--tp") or 1)


def cpu_threads_per_instance(instances: int) -> int:
    """Split the machine's cores among the CPU instances that share it, less one core for the frontend
    and the instances' tokenizer processes. An instance's OpenMP threads wait for each other at every
    operator: with as many threads as cores, one thread that loses its core to those processes stalls
    every step (one instance with two threads on two cores ran a load of short requests 8x slower than
    with one)."""
    cores = os.cpu_count() or 1
    return max(1, (cores - 1 if cores > 1 else cores) // max(1, instances))


@dataclass
class InstanceSpec:
    """Everything needed to start one SGLang server."""

    model_path: str
    port: int
    host: str = LOOPBACK
    sglang_args: list[str] = field(default_factory=list)
    cpu: bool = True
    gpus: str | None = None  # the instance's CUDA_VISIBLE_DEVICES (plan_gpus): its GPUs, TP ranks in order
    with_plugin: bool = True  # False = plain SGLang (the benchmark baseline)
    log_path: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    # CPU only: torch threads of this instance. K instances that each spin up every core's worth of
    # OpenMP threads oversubscribe the CPU and run ~15x slower than with the cores split among them.
    cpu_threads: int | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def cpu_default_args(sglang_args: list[str]) -> list[str]:
    """The flags SGLang needs on a CPU-only machine, unless the user gave them."""
    args: list[str] = []
    if "--device" not in sglang_args:
        args += ["--device", "cpu"]
    if "--max-total-tokens" not in sglang_args:
        args += ["--max-total-tokens", str(INSTANCES.cpu_max_total_tokens)]
    # An idle SGLang scheduler spins a whole core; CPU instances share the machine's cores, so an idle
    # one would slow the busy ones. It wakes on the next request at once.
    if "--sleep-on-idle" not in sglang_args:
        args += ["--sleep-on-idle"]
    return args


def gpu_default_args(sglang_args: list[str]) -> list[str]:
    """On a GPU SGLang samples with FlashInfer by default, which ignores per-request seeds: a chunked
    or migrated sample would then draw other tokens than an unchunked run. Seer's instances use the
    seeded sampler unless the user chose a backend."""
    return [] if has_flag(sglang_args, "--sampling-backend") else ["--sampling-backend", SEEDED_SAMPLER]


def seeded_sampling(sglang_args: list[str]) -> bool:
    """Whether instances started with these flags draw with per-sample seeds (``gpu_default_args``
    picks the seeded sampler on a GPU; the CPU engine has only it)."""
    return flag_value(sglang_args, "--sampling-backend") in (None, SEEDED_SAMPLER)


# A CPU instance forks its scheduler and detokenizer (``cpu_shims.launch_server`` says why); plain SGLang
# instances on CPU start the same way as seer's, so a baseline and seer's modes differ only in the plugin.
SERVER_MODULES = {True: cpu_launch.__name__, False: cpu_launch.SGLANG_SERVER}


def is_instance_command(cmdline: list[str]) -> bool:
    """Whether a process's command line is an SGLang server that ``build_command`` started."""
    return any(module in cmdline for module in SERVER_MODULES.values())


def build_command(spec: InstanceSpec) -> list[str]:
    cmd = [sys.executable, "-m", SERVER_MODULES[spec.cpu], "--model-path", spec.model_path,
           "--host", spec.host, "--port", str(spec.port)]
    cmd += cpu_default_args(spec.sglang_args) if spec.cpu else gpu_default_args(spec.sglang_args)
    return cmd + list(spec.sglang_args)


def build_env(spec: InstanceSpec) -> dict[str, str]:
    env = dict(os.environ)
    if spec.cpu:
        env["SGLANG_USE_CPU_ENGINE"] = "1"
        if spec.cpu_threads and "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = str(spec.cpu_threads)
    if spec.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = spec.gpus
    if not spec.with_plugin:
        env["SGLANG_PLUGINS"] = "none"  # a whitelist that matches no plugin: plain SGLang
    env.update(spec.extra_env)
    return env


@dataclass
class InstanceProcess:
    spec: InstanceSpec
    popen: subprocess.Popen

    @property
    def url(self) -> str:
        return self.spec.url

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.spec.log_path, lines)


def start_instance(spec: InstanceSpec) -> InstanceProcess:
    log = open(spec.log_path, "ab") if spec.log_path else subprocess.DEVNULL
    try:
        popen = subprocess.Popen(build_command(spec), env=build_env(spec), stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 preexec_fn=die_with_parent)
    finally:
        if log is not subprocess.DEVNULL:
            log.close()
    return InstanceProcess(spec, popen)


class InstanceStartError(RuntimeError):
    pass


PORT_RETRIES = 2


def _port_taken(inst: InstanceProcess) -> bool:
    """The instance died because a port it (or SGLang inside it) picked was taken before it bound it."""
    tail = inst.log_tail(60)
    return "EADDRINUSE" in tail or "address already in use" in tail.lower()


def restart_on_new_port(inst: InstanceProcess) -> None:
    """Start a dead instance again on a fresh port (SGLang picks its internal ports anew too)."""
    old = inst.spec.port
    inst.spec.port = free_port(inst.spec.host)
    log.warning(
        "instance on port %d lost a port race at start; starting it again on port %d", old, inst.spec.port)
    inst.popen = start_instance(inst.spec).popen


def wait_healthy(instances: list[InstanceProcess], timeout_s: float = 600.0, progress: bool = True) -> float:
    """Block until every instance answers ``/health`` with 200; returns seconds waited. An instance that
    exits first raises at once (or, when it lost a port race, is started again on a new port)."""
    from tqdm import tqdm

    start = time.monotonic()
    pending = {inst.url: inst for inst in instances}
    restarts: dict[str, int] = {}
    bar = tqdm(total=len(instances), desc="starting SGLang instances", unit="inst", disable=not progress,
               file=sys.stderr)

    def all_healthy(client: httpx.Client) -> bool:
        for url, inst in list(pending.items()):
            if not inst.alive():
                if restarts.get(url, 0) < PORT_RETRIES and _port_taken(inst):
                    restart_on_new_port(inst)
                    restarts[inst.url] = restarts.pop(url, 0) + 1
                    del pending[url]
                    pending[inst.url] = inst
                    continue
                raise InstanceStartError(
                    f"instance {url} exited with code {inst.popen.returncode}; last log lines:\n{inst.log_tail()}")
            try:
                if client.get(f"{url}/health").status_code == 200:
                    del pending[url]
                    bar.update(1)
            except httpx.HTTPError:
                pass
        return not pending

    try:
        with httpx.Client(timeout=2.0) as client:
            wait_until(lambda: all_healthy(client), timeout_s, 0.25, what="SGLang instances healthy")
    except TimeoutError:
        raise InstanceStartError(f"instances not healthy after {timeout_s:.0f}s: {sorted(pending)}") from None
    finally:
        bar.close()
    return time.monotonic() - start


def stop_instances(instances: list[InstanceProcess], grace_s: float = 15.0) -> None:
    stop_processes([inst.popen for inst in instances], grace_s, signal.SIGINT)
