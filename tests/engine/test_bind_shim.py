"""The bind shim preloaded into the instances and Mooncake's store service (``launch/bind_host.c``): a bind to every interface
lands on the store's host, every other bind is left alone, and a dual-stack socket still takes the IPv4
connections its peers make to the advertised address."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from seer_sglang.launch.bind_host import bind_env, is_loopback, loopback_env

pytestmark = pytest.mark.skipif(not (os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")),
                                reason="no C compiler to build the shim")

PROBE = r"""
import json, socket
out = {}
s4 = socket.socket(socket.AF_INET); s4.bind(("0.0.0.0", 0)); s4.listen(); out["v4_any"] = s4.getsockname()[0]
s6 = socket.socket(socket.AF_INET6)
s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0); s6.bind(("::", 0)); s6.listen()
out["v6_any"] = s6.getsockname()[0]
socket.create_connection(("127.0.0.1", s6.getsockname()[1]), timeout=5).close()
out["v4_reaches_v6"] = True
only = socket.socket(socket.AF_INET6)
only.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1); only.bind(("::", 0)); out["v6only_any"] = only.getsockname()[0]
lo = socket.socket(socket.AF_INET); lo.bind(("127.0.0.1", 0)); out["v4_explicit"] = lo.getsockname()[0]
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("", 0)); out["udp_any"] = udp.getsockname()[0]
print(json.dumps(out))
"""


def probe(env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_wildcard_binds_land_on_the_host_and_others_stay():
    env = bind_env("127.0.0.1")
    assert env["SEER_BIND_HOST"] == "127.0.0.1" and env["LD_PRELOAD"].endswith(".so")
    got = probe(env)
    assert got == {"v4_any": "127.0.0.1", "v6_any": "::ffff:127.0.0.1", "v4_reaches_v6": True,
                   "v6only_any": "::1", "v4_explicit": "127.0.0.1", "udp_any": "127.0.0.1"}
    # without it, the same binds listen on every interface
    plain = probe({})
    assert plain["v4_any"] == "0.0.0.0" and plain["v6_any"] == "::" and plain["v6only_any"] == "::"


def test_a_preload_already_set_is_kept():
    os.environ["LD_PRELOAD"] = "libother.so"
    try:
        assert bind_env("127.0.0.1")["LD_PRELOAD"].split()[1:] == ["libother.so"]
    finally:
        del os.environ["LD_PRELOAD"]


def test_only_a_loopback_host_is_confined():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert loopback_env("localhost")["SEER_BIND_HOST"] == "127.0.0.1"
    assert loopback_env("10.0.0.5") == {} and loopback_env("node-3") == {} and loopback_env("0.0.0.0") == {}
