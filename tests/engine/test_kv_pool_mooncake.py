"""``--kv-pool mooncake``: the same migration as with the file pool, through a local Mooncake store.

The run happens in a private network namespace: loopback plus an interface with a private address on
a veth pair, reachable from nowhere else. The routable interface is there so that a port bound to
every interface shows as such; seer's bind shim must keep every Mooncake port on loopback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LOOPBACK_ADDRESSES
from seer_sglang.config import KV_POOL
from seer_sglang.launch.mooncake import mooncake_available

PAGE = 16
WRITE_WAIT_S = KV_POOL.write_wait_ms / 1000  # the bound an answer waits for its pool writes


def _namespace_ok() -> bool:
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(mooncake_available() is not None, reason=f"Mooncake unavailable: {mooncake_available()}")
@pytest.mark.skipif(not _namespace_ok(), reason="cannot create a network namespace (unshare -n) to contain Mooncake")
def test_request_moved_between_instances_loads_its_kv_from_mooncake(tmp_path):
    script = Path(__file__).with_name("mooncake_migration.py")
    setup = ("ip link set lo up && ip link add seer0 type veth peer name seer1 "
             "&& ip addr add 10.211.0.1/24 dev seer0 && ip link set seer1 up "
             "&& ip link set seer0 up")
    cmd = ["unshare", "-n", "sh", "-c", f'{setup} && SGLANG_HOST_IP=10.211.0.1 exec "{sys.executable}" "{script}" "{tmp_path}"']
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
    assert lines, f"no result (exit {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    result = json.loads(lines[-1][len("RESULT "):])
    # The store service's REST API (put, get, remove_all; no auth) listens on loopback only.
    binds = json.loads(next(l for l in out.stdout.splitlines() if l.startswith("BIND "))[len("BIND "):])
    print("Mooncake listeners:", binds)
    rest = [ip for ip, port in binds["store"] if port == binds["store_rest_port"]]
    assert rest == ["127.0.0.1"], binds
    # The master listens on loopback only: its RPC and metrics ports; no HTTP metadata server (the
    # transfer engines find each other by Mooncake's P2P handshake).
    assert {ip for ip, _ in binds["master"]} == {"127.0.0.1"} and len(binds["master"]) == 2, binds
    # Every process under the launcher listens on loopback only: the transfer engines' RPC and data
    # ports in the store service and in every instance's store client included.
    assert len(binds["store"]) >= 3, binds  # the REST API, the transfer engine's RPC and its TCP data port
    assert {ip for ip, _ in binds["store"] + binds["others"]} <= LOOPBACK_ADDRESSES, binds
    assert result["details"].get("storage", 0) >= result["context"] - PAGE, result
    assert result["details"].get("storage_backend") == "MooncakeStore", result
    assert result["identical"], result
    # After a weight update, no page of the old weights is loaded, from the store or the device.
    stales = [l for l in out.stdout.splitlines() if l.startswith("STALE ")]
    assert stales, f"no stale-KV result (exit {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    stale = json.loads(stales[-1][len("STALE "):])
    assert stale["moved_version"] == stale["version"] and stale["moved_cached"] == 0, stale
    assert stale["again_details"].get("device", 0) == 0, stale  # A's device pages are of the old weights
    assert stale["again_details"].get("storage", 0) >= stale["context"] - PAGE, stale  # B's new pages
    # One instance killed mid-rollout: the moved samples load their KV from the store.
    kills = [l for l in out.stdout.splitlines() if l.startswith("KILL ")]
    assert kills, f"no kill result (exit {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    kill = json.loads(kills[-1][len("KILL "):])
    assert kill["samples"] == 24 and kill["moved"] and kill["identical"], json.dumps(kill)
    assert kill["pool_pages"] >= 0.9 * kill["kv_pages"], json.dumps(kill)
    # The Mooncake master killed: a continuation whose context is gone from the device recomputes it, with
    # no error and the same tokens; the dead pool holds up one answer for the write bound, not every one.
    masters = [l for l in out.stdout.splitlines() if l.startswith("MASTER ")]
    assert masters, f"no master-kill result (exit {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    master = json.loads(masters[-1][len("MASTER "):])
    print("master killed:", json.dumps(master))
    down, back = master["down"], master["back"]
    assert master["healthy_while_down"] == 200 and down["identical"], master
    assert down["cached"] == 0, master  # recomputed: nothing from the device, the host or the store
    assert down["next_s"] < WRITE_WAIT_S, master  # the first answer's wait ran out and tripped the breaker
    rollout = master["rollout_while_down"]  # chunked on the survivor: every sample once, plain tokens
    assert rollout["status"] == 200 and rollout["prompts"] == list(range(24)), master
    assert rollout["chunks"] > 24 and rollout["identical"], master
    assert back["identical"], master
    # A new master on the same address: the pool recovers, and a move loads its context from the store again.
    assert back["details"].get("storage", 0) > 0 and back["details"].get("device", 0) == 0, master
