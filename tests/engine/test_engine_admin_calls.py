"""An admin call fanned out to the instances, through the frontend's admin route (which speaks SGLang's
own request types)."""

from __future__ import annotations

import asyncio

from seer_sglang.core.policy import WholeGroupPolicy
from seer_sglang.frontend.engine import RolloutEngine


def test_an_admin_call_names_a_hung_instance_and_skips_one_marked_down():
    """One instance accepts the connection and never answers (a stopped process), one is marked down:
    the fan-out answers within the control timeout, with each instance's own status."""
    import time

    from seer_sglang.config import RolloutConfig
    from seer_sglang.frontend.instance_client import InstanceClient
    from seer_sglang.frontend.routes.admin import answer

    async def run():
        async def hang(reader, writer):
            await asyncio.sleep(60)

        server = await asyncio.start_server(hang, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        config = RolloutConfig(control_timeout_s=0.5)
        clients = [InstanceClient(f"http://127.0.0.1:{port}", 0, config),
                   InstanceClient("http://127.0.0.1:9", 1, config)]
        engine = RolloutEngine(clients, WholeGroupPolicy(), poll_interval_s=3600)
        engine.views[0].healthy, engine.views[1].healthy = True, False
        start = time.monotonic()
        results = await engine.instances.broadcast("/abort_request", {"abort_all": True}, control=True)
        assert time.monotonic() - start < 5
        assert results[0]["status"] == 504 and "did not answer" in results[0]["body"]["error"]
        assert results[1]["status"] == 503 and results[1]["skipped"]
        assert answer(results, down_ok=True).status_code == 502  # the hung one fails the call
        assert answer(results[1:], down_ok=True).status_code == 200  # a skipped one alone does not
        assert answer(results[1:], down_ok=False).status_code == 502  # ... except for a weight update
        server.close()
        for c in clients:
            await c.close()

    asyncio.run(run())
