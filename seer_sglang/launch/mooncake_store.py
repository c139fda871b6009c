"""``python -m seer_sglang.launch.mooncake_store --host H [Mooncake's flags]``: Mooncake's store service
with its REST API bound to ``H``.

Mooncake's own ``mooncake.mooncake_store_service`` binds that API (put, get, remove_all, no
authentication) to every interface; anyone who reaches it could wipe the pool or write KV pages that
instances would load as their own. This entry point runs the same service with the bind address
seer chose (loopback unless ``--kv-pool-host`` says otherwise).
"""

from __future__ import annotations

import asyncio
import sys


def bound_site(host: str):
    """aiohttp's ``TCPSite`` with its host fixed to ``host``, whatever the caller passes."""
    from aiohttp import web

    class Site(web.TCPSite):
        def __init__(self, runner, _host=None, port=None, **kwargs):
            super().__init__(runner, host, port, **kwargs)

    return Site


def main(argv: list[str]) -> None:
    host = "127.0.0.1"
    if argv[:1] == ["--host"]:
        host, argv = argv[1], argv[2:]
    from mooncake import mooncake_store_service as service

    service.web.TCPSite = bound_site(host)  # the module's own reference to aiohttp.web
    sys.argv = [service.__file__, *argv]
    asyncio.run(service.main())


if __name__ == "__main__":
    main(sys.argv[1:])
