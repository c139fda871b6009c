"""The draft server as a process: two instances share drafts through it, groups expire, and a killed
server is survived (the store itself is tested in process in tests/unit/test_draft_server.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seer_sglang.draft_server.client import DraftClient, call, wait_ready
from seer_sglang.draft_server.codec import pack_tokens
from seer_sglang.launch.waiting import wait_until
from seer_sglang.launch.instances import free_port


def start_server(address: str, log_path: Path, *extra: str) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "seer_sglang.draft_server", "--bind", address, *extra],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_ready(address, timeout_s=60)
    except BaseException:
        stop_server(proc)
        raise
    return proc


def stop_server(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, sig)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def server(tmp_path):
    address = f"tcp://127.0.0.1:{free_port()}"
    proc = start_server(address, tmp_path / "draft_server.log")
    yield address, proc, tmp_path / "draft_server.log"
    stop_server(proc)


# ---- a real server process ----
def test_two_instances_draft_each_others_tokens(server):
    address, _, _ = server
    prompt = list(range(1000, 1016))
    text_a = list(range(50, 90))
    text_b = [7, 6, 5, 4, 3, 2, 1, 70, 71, 72, 73]
    with DraftClient(address) as a, DraftClient(address) as b:
        a.register_group("g", prompt, ttl_s=60)
        a.update("g", "r0", 0, text_a)
        b.update("g", "r1", 0, text_a[:10])  # b's request starts like a's
        assert b.draft("g", "r1", 8).tokens == []  # nothing from a yet
        wait_until(lambda: b.draft("g", "r1", 8).tokens == text_a[10:18], 10, 0.005, "the clients to see it")
        assert b.prompt("g") == prompt  # the prompt came along
        b.update("g", "r1", 10, text_b)
        a.update("g", "r0", 40, [7, 6, 5])
        wait_until(lambda: a.draft("g", "r0", 4).tokens == [4, 3, 2, 1], 10, 0.005, "the clients to see it")
        assert a.flush(5) and b.flush(5)
        stats = call(address, "stats")
        assert stats["groups"] == 1 and stats["requests"] == 2
        assert stats["tokens"] == len(text_a) + 3 + 10 + len(text_b)
        assert stats["fetched_tokens"] >= len(text_a)
        # incremental: a second replica receives only what it lacks
        b.sync(5)
        before = b.counters["fetched_tokens"]
        a.update("g", "r0", 43, [9, 9])
        wait_until(lambda: b.drafter.count("g", "r0") == 45, 10, 0.005, "the clients to see it")
        assert b.counters["fetched_tokens"] - before == 2
        a.drop_group("g")
        wait_until(lambda: call(address, "stats")["groups"] == 0, 10, 0.005, "the clients to see it")


def test_groups_expire_after_their_ttl_without_updates(server):
    address, _, _ = server
    with DraftClient(address) as a:
        a.register_group("short", [1, 2], ttl_s=0.4)
        a.register_group("kept", [1, 2], ttl_s=0.4)
        a.update("short", "r", 0, [1])
        assert a.flush(5)
        for i in range(12):  # "kept" gets updates, "short" does not
            a.update("kept", "r", i, [i])
            time.sleep(0.1)
        assert a.flush(5)
        reply = call(address, "fetch", ["short", "kept"], {})
        assert reply["short"] is None and reply["kept"] is not None
        assert call(address, "stats")["expired"] >= 1


def test_server_killed_then_restarted(server):
    address, proc, log_path = server
    sibling = list(range(100, 160))
    with DraftClient(address, timeout_s=0.3) as a, DraftClient(address, timeout_s=0.3) as b:
        a.register_group("g", [1, 2, 3], ttl_s=60)
        a.update("g", "ra", 0, sibling[:30])
        b.update("g", "rb", 0, sibling[:5])
        wait_until(lambda: b.draft("g", "rb", 4).tokens == sibling[5:9], 10, 0.005, "the clients to see it")
        stop_server(proc, signal.SIGKILL)

        # the server is gone: both instances keep appending and drafting from their replicas
        for i in range(30, 60, 5):
            assert a.update("g", "ra", i, sibling[i:i + 5]) == i + 5
            assert a.draft("g", "ra", 4).tokens == []  # its own text has no repeat yet
        assert b.update("g", "rb", 5, sibling[5:12] + [900, 901, 902, 100, 101]) == 17
        assert b.draft("g", "rb", 3).tokens == [102, 103, 104]  # a's first 30 tokens synced before
        assert b.draft("g", "rb", 40).tokens == sibling[2:30]  # but not what a wrote during the outage
        wait_until(lambda: not a.connected and not b.connected, 5, 0.005, "the clients to see it")
        assert a.pending() > 0

        # a fresh server (no state) on the same address: groups and tokens are pushed again
        restarted = start_server(address, log_path)
        try:
            wait_until(lambda: b.draft("g", "rb", 40).tokens == sibling[2:42], 20, 0.005, "the clients to see it")
            assert a.flush(10) and b.flush(10)
            stats = call(address, "stats")
            assert stats["tokens"] == 60 + 17
            assert call(address, "fetch", ["g"], {})["g"]["prompt"] == pack_tokens([1, 2, 3])
            assert a.connected and b.connected and a.counters["reconnects"] == 1
        finally:
            stop_server(restarted)
