"""Seer servers for benchmarks, started the way the tests start them (``seer_sglang.launch.seer_process``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from seer_sglang.launch.seer_process import start_seer, stop_seer, wait_seer


def launch_seer(model_path: str, flags: list[str], log_dir: Path) -> tuple[subprocess.Popen, str]:
    """``python -m seer_sglang.launch_server`` on a free port with ``flags``; returns once it is healthy
    (a benchmark's deployment may take long to start: many instances on a busy host)."""
    server = start_seer(model_path, log_dir, *flags)
    try:
        wait_seer(server, timeout_s=1800)
    except Exception as e:
        stop_seer(server)
        raise RuntimeError(f"seer server did not start ({e}); see {log_dir}") from None
    return server.proc, server.url


def seer_server(model_path: str, args, engine_args: list[str], log_dir: Path) -> tuple[subprocess.Popen, str]:
    """A benchmark's seer server: its ``--instances`` and ``--chunk-size``, and ``engine_args``."""
    return launch_seer(model_path, ["--num-instances", str(args.instances), "--chunk-size", str(args.chunk_size),
                                    *engine_args], log_dir)
