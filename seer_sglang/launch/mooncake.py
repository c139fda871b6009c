"""A one-machine Mooncake store (master + store service, bound to ``--kv-pool-host``: loopback by
default) for ``--kv-pool mooncake``.

Mooncake's transfer engines (in the store service and in every instance's store client) bind their
RPC and data ports to every interface whatever host they are told; the store service runs with the
bind shim (``bind_host``) on the store's host, and the instances with it on theirs.

Multi-node runs attach to an existing cluster with ``--kv-pool-config`` instead. The package is
``mooncake-transfer-engine-non-cuda`` on CPU (``mooncake-transfer-engine`` on GPU); its import
needs ``libibverbs.so.1`` even over TCP.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import psutil

from ..config import LOOPBACK
from .bind_host import bind_env
from .waiting import wait_until


class MooncakeUnavailable(ValueError):
    pass


# ``scripts/setup.sh`` unpacks libibverbs and its libnl dependencies here when the system lacks them.
_LIB_NAMES = ("libnl-3.so.200", "libnl-route-3.so.200", "libibverbs.so.1")


def private_lib_dir() -> Path | None:
    path = Path(sys.prefix) / "mooncake-libs"
    return path if (path / "libibverbs.so.1").exists() else None


def library_env() -> dict[str, str]:
    """Environment for processes that load Mooncake (instances, master, store service)."""
    lib = private_lib_dir()
    if lib is None:
        return {}
    current = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": f"{lib}:{current}" if current else str(lib)}


def _preload_private_libs() -> None:
    lib = private_lib_dir()
    if lib is None:
        return
    for name in _LIB_NAMES:
        ctypes.CDLL(str(lib / name), mode=ctypes.RTLD_GLOBAL)


def _master_binary() -> Path | None:
    beside = Path(sys.executable).parent / "mooncake_master"  # a venv's bin/ need not be on PATH
    if beside.exists():
        return beside
    found = shutil.which("mooncake_master")
    return Path(found) if found else None


def mooncake_available() -> str | None:
    """None when Mooncake can run here, else why not."""
    try:
        _preload_private_libs()
        import mooncake.store  # noqa: F401
    except Exception as e:  # ImportError, or OSError for a missing libibverbs
        return f"Mooncake is not importable ({type(e).__name__}: {e}); install it with `bash scripts/setup.sh --with-mooncake`"
    if _master_binary() is None:
        return "mooncake_master is not installed"
    return None


def start_local_mooncake(log_dir: Path, size_gb: float, host: str = LOOPBACK) -> tuple[dict, list[subprocess.Popen]]:
    """Start master + store service bound to loopback; returns the SGLang client config and the processes."""
    from .processes import die_with_parent, free_port, stop_processes

    why = mooncake_available()
    if why:
        raise MooncakeUnavailable(why)
    rpc, metrics, store = (free_port(host) for _ in range(3))
    procs: list[subprocess.Popen] = []

    env = {**os.environ, **library_env(), **bind_env(host)}  # every wildcard bind on the store's host

    def spawn(cmd: list[str], name: str) -> None:
        with open(log_dir / f"mooncake-{name}.log", "ab") as log:
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=env, preexec_fn=die_with_parent))

    spawn([str(_master_binary()), f"--rpc_address={host}", f"--rpc_port={rpc}", "--enable_http_metadata_server=false",
           f"--metrics_host={host}", f"--metrics_port={metrics}"], "master")
    common = {"local_hostname": host, "metadata_server": "P2PHANDSHAKE",
              "master_server_address": f"{host}:{rpc}", "protocol": "tcp", "device_name": ""}
    store_config = log_dir / "mooncake-store.json"
    # The store's segment is DRAM: never more than an eighth of the machine's memory.
    segment_gb = max(1, int(min(size_gb, psutil.virtual_memory().total / 2**30 / 8)))
    store_config.write_text(json.dumps({**common, "global_segment_size": f"{segment_gb}gb",
                                        "local_buffer_size": 0}))
    try:
        _wait_port(host, metrics, procs[0])
        spawn([sys.executable, "-m", "seer_sglang.launch.mooncake_store", "--host", host, f"--config={store_config}",
               f"--port={store}"], "store")
        _wait_port(host, store, procs[1])
    except Exception:
        stop_processes(procs)
        raise
    return {**common, "global_segment_size": 0}, procs


def _wait_port(host: str, port: int, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    def answers() -> bool:
        if proc.poll() is not None:
            raise MooncakeUnavailable(f"a Mooncake process exited with code {proc.returncode}")
        try:
            httpx.get(f"http://{host}:{port}/", timeout=1.0)
            return True
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, timeout_s, 0.2, what=f"Mooncake on {host}:{port}")
    except TimeoutError:
        raise MooncakeUnavailable(f"Mooncake did not open {host}:{port} within {timeout_s:.0f}s") from None
