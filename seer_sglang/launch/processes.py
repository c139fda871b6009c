"""Process plumbing shared by everything the launcher starts (instances, the draft server, Mooncake):
ports for servers that bind later, children that die with the launcher, and stopping by pid."""

from __future__ import annotations

import ctypes
import random
import signal
import socket
import subprocess
from pathlib import Path

import psutil

from ..config import LOOPBACK

_PR_SET_PDEATHSIG = 1


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = LOOPBACK, low: int = 30100, high: int = 32700, attempts: int = 64) -> int:
    """A free port for a server that binds it only later (an instance binds after loading its model).

    Picked where nothing else on the machine picks at random: below the kernel's ephemeral range
    (32768+, where bind(0) and every outgoing connection take their ports), above SGLang's own pick for
    NCCL (22000-29999) and Mooncake's transfer ports (12000-17000), and off SGLang's default 30000.
    """
    high = min(high, _ephemeral_low() - 1)
    if high > low:
        for port in random.sample(range(low, high + 1), min(attempts, high - low + 1)):
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind((host, port))
                return port
            except OSError:
                continue
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct free ports (``free_port``) for servers started together: each pick is free when
    made, but nothing binds it before the next pick, which may land on it again."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


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
