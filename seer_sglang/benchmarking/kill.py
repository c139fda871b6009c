"""Kill one instance of a running seer server mid-rollout, and find the samples that moved.

Shared by the fault tests and ``benchmarks.kv_pool``: both need the same answer to "which samples
lost their instance, and where did their context come from on the next one".
"""

from __future__ import annotations

import httpx
import psutil

from ..launch.instances import is_instance_command


def chunk_tokens_done(url: str) -> float:
    """Tokens returned by finished chunks so far (the frontend's ``seer_chunk_tokens_total``)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("seer_chunk_tokens_total{"))


def instance_processes(launcher_pid: int) -> list[psutil.Process]:
    """The SGLang server processes a ``seer_sglang.launch_server`` started (its direct children)."""
    return [p for p in psutil.Process(launcher_pid).children(recursive=False) if is_instance_command(p.cmdline())]


def kill_tree(proc: psutil.Process) -> None:
    """SIGKILL a process and all of its descendants (an SGLang server and its scheduler, detokenizer)."""
    for p in [proc] + proc.children(recursive=True):
        p.kill()


def first_instance(url: str, launcher_pid: int) -> tuple[psutil.Process, int]:
    """The launcher's first SGLang instance process, and its index in the frontend's ``/instances``."""
    victim = instance_processes(launcher_pid)[0]
    cmd = victim.cmdline()
    victim_url = f"http://127.0.0.1:{cmd[cmd.index('--port') + 1]}"
    urls = [i["url"] for i in httpx.get(f"{url}/instances", timeout=10).json()["instances"]]
    return victim, urls.index(victim_url)


def kill_instance(url: str, launcher_pid: int) -> int:
    """SIGKILL the launcher's first SGLang instance and its children; returns its index in ``/instances``."""
    victim, index = first_instance(url, launcher_pid)
    kill_tree(victim)
    return index


def moved_chunks(samples: list[dict], victim: int) -> list[tuple[dict, dict]]:
    """(sample, its first chunk elsewhere) for each sample that ran on ``victim`` until it died and
    then continued on another instance. Chunks lost with the instance never reported, so they carry
    no weight version and are skipped."""
    moved = []
    for s in samples:
        reported = [c for c in s["chunks"] if c["weight_version"] is not None]
        away = next((j for j, c in enumerate(reported) if c["instance"] != victim), None)
        if away:  # None: never left the victim; 0: never ran on it
            moved.append((s, reported[away]))
    return moved
