"""Process plumbing shared by everything the launcher starts (instances, the draft server, Mooncake):
ports for servers that bind later, children that die with the launcher, and stopping by pid."""

from __future__ import annotations

import collections
import ctypes
import random
import signal
import socket
import subprocess
import threading
from pathlib import Path

import psutil

from ..config import LOOPBACK

_PR_SET_PDEATHSIG = 1


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# The ports free_port handed out lately in this process. A picked port is free when picked, but its
# server binds it only later, so a second pick (another instance's, the same server's second port)
# could land on it again: each pick skips these.
_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=256)
_HANDING_OUT = threading.Lock()


def free_port(host: str = LOOPBACK, low: int = 30100, high: int = 32700, attempts: int = 64) -> int:
    """A free port for a server that binds it only later (an instance binds after loading its model),
    none that this process handed out lately (``_HANDED_OUT``).

    Picked where nothing else on the machine picks at random: below the kernel's ephemeral range
    (32768+, where bind(0) and every outgoing connection take their ports), above SGLang's own pick for
    NCCL (22000-29999) and Mooncake's transfer ports (12000-17000), and off SGLang's default 30000.
    """
    with _HANDING_OUT:
        port = _pick_port(host, low, min(high, _ephemeral_low() - 1), attempts)
        _HANDED_OUT.append(port)
        return port


def _pick_port(host: str, low: int, high: int, attempts: int) -> int:
    if high > low:
        for port in random.sample(range(low, high + 1), min(attempts, high - low + 1)):
            if port in _HANDED_OUT:
                continue
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind((host, port))
                return port
            except OSError:
                continue
    while True:  # the kernel's pick; it too may repeat a port nothing has bound yet
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            return port


def die_with_parent() -> None:
    """Runs in the child before exec: if the launcher dies (even by SIGKILL), the instance gets SIGTERM."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def stop_processes(popens: list[subprocess.Popen], grace_s: float = 15.0, sig: int = signal.SIGTERM) -> None:
    """Stop what we started: ``sig`` to each main pid, wait, then SIGKILL surviving descendants."""
    family: list[psutil.Process] = []
    for popen in popens:
        try:
            proc = psutil.Process(popen.pid)
            family += [proc] + proc.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        if popen.poll() is None:
            popen.send_signal(sig)
    _, alive = psutil.wait_procs(family, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    for popen in popens:
        try:
            popen.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
