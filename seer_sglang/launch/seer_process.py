"""A seer server as a child process: ``python -m seer_sglang.launch_server`` started on a free port, waited
for and stopped with everything it started. The one way the tests and the benchmarks start a server.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psutil

from .instances import free_port
from .waiting import wait_healthy

STARTUP_TIMEOUT_S = 600


@dataclass
class SeerServer:
    url: str
    proc: subprocess.Popen
    log_dir: Path
    log_path: Path

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


def start_seer(model: str | None, log_dir: Path, *extra: str) -> SeerServer:
    """Start the server (``model=None``: the embedded default); its output goes to
    ``log_dir/launch_server.log``. Returns at once: ``wait_seer`` waits for it."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "launch_server.log"
    cmd = [sys.executable, "-m", "seer_sglang.launch_server", "--port", str(port), "--log-dir", str(log_dir),
           *(["--model-path", model] if model else []), *extra]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return SeerServer(f"http://127.0.0.1:{port}", proc, log_dir, log_path)


def wait_seer(server: SeerServer, status: int = 200, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Until the frontend's /health answers ``status`` (200 = ready, 503 = up without instances); raises
    at once if the server exits, with its log's tail."""
    wait_healthy(server.url, timeout_s, process=server.proc, status=status, log_path=server.log_path)


def stop_seer(server: SeerServer, sig: int = signal.SIGTERM, timeout_s: float = 60) -> list[psutil.Process]:
    """Signal the launcher; returns descendants still alive afterwards (killed, so nothing leaks)."""
    family = server.descendants()
    if server.proc.poll() is None:
        server.proc.send_signal(sig)
    try:
        server.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        server.proc.kill()
    _, alive = psutil.wait_procs(family, timeout=10)
    for p in alive:
        p.kill()
    return alive


@contextlib.contextmanager
def running_seer(model: str | None, log_dir: Path, *extra: str,
                 timeout_s: float = STARTUP_TIMEOUT_S) -> Iterator[SeerServer]:
    """A seer server for the span of a ``with``: started, healthy, and stopped however the body ends."""
    server = start_seer(model, log_dir, *extra)
    try:
        wait_seer(server, timeout_s=timeout_s)
        yield server
    finally:
        stop_seer(server)
