"""Keep the listeners of the processes seer starts on one host: ``bind_host.c`` preloaded.

Some of those processes bind ports to every interface whatever host they are given, with no setting
to change it: SGLang's scheduler (torch.distributed's TCP store for its process group) and Mooncake's
transfer engine (its RPC/handshake and TCP data ports, which move KV pages without authentication).
The shim, preloaded with ``LD_PRELOAD``, turns each bind to every interface into a bind to
``SEER_BIND_HOST``; binds to a given address are left alone.

It is compiled once per source into the cache (``cbuild``), at set-up or on first use. Without a C
compiler nothing is preloaded, with a warning, and those ports listen on every interface.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from pathlib import Path

from ..cbuild import cache_dir, compile_shared, digest

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("bind_host.c")
_warned: set[str] = set()


def bind_shim(force: bool = False) -> Path:
    """``bind_host.c`` compiled; RuntimeError when it cannot be."""
    return compile_shared(cache_dir() / f"libseer_bind_host-{digest([SOURCE])}.so", SOURCE, libs=["-ldl"],
                          force=force)


def bind_env(host: str) -> dict[str, str]:
    """The environment that keeps a process's binds to every interface on ``host`` (an address): the
    shim in ``LD_PRELOAD`` (ahead of any already there) and ``SEER_BIND_HOST``. Empty, with one warning,
    when the shim cannot be built."""
    try:
        shim = str(bind_shim())
    except RuntimeError as e:
        if str(e) not in _warned:
            _warned.add(str(e))
            log.warning("ports that SGLang and Mooncake bind to every interface will stay there: the bind "
                        "shim did not build (%s)", e)
        return {}
    current = os.environ.get("LD_PRELOAD")
    return {"LD_PRELOAD": f"{shim} {current}" if current else shim, "SEER_BIND_HOST": host}


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def loopback_env(host: str) -> dict[str, str]:
    """``bind_env`` for a process on a loopback ``host``; nothing for any other host. The shim moves
    every wildcard bind of a process: on a routable host some of them (the TCP store of a process
    group spanning nodes, a transfer engine others reach) must stay reachable from elsewhere, and the
    user chooses the interfaces."""
    if not is_loopback(host):
        return {}
    return bind_env("127.0.0.1" if host == "localhost" else host)
