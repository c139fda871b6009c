"""The engine's bookkeeping of chunks in flight when a chunk is cancelled before its task first runs.

The instance client here is a stand-in that never answers, so the test controls exactly when a chunk
task gets to run; the engine's behaviour with real SGLang instances is tested in tests/engine."""

from __future__ import annotations

import asyncio

from seer_sglang.core.policy import WholeGroupPolicy
from seer_sglang.core.request import Group, Sample, SamplingParams, SampleState
from seer_sglang.frontend.engine import RolloutEngine
from seer_sglang.frontend.instance_client import InstanceLoad
from seer_sglang.wire import sample_rid


class SilentInstance:
    """Answers load polls; a chunk sent to it waits until it is cancelled."""

    def __init__(self, index: int):
        self.index, self.url = index, f"http://127.0.0.1:{40000 + index}"
        self.chunks = 0

    async def load(self) -> InstanceLoad:
        return InstanceLoad(max_total_tokens=4096)

    async def generate(self, payload):
        self.chunks += 1
        await asyncio.Event().wait()

    async def close(self) -> None:
        pass


def _group(gid: str, n: int = 2) -> Group:
    samples = [Sample(rid=sample_rid(gid, k), group_id=gid, index=k, prompt_ids=[1, 2, 3],
                      params=SamplingParams(max_new_tokens=8)) for k in range(n)]
    return Group(group_id=gid, prompt_ids=[1, 2, 3], samples=samples)


def _engine(instances: int = 1) -> RolloutEngine:
    return RolloutEngine([SilentInstance(i) for i in range(instances)], WholeGroupPolicy(), poll_interval_s=3600)


def test_an_abort_in_the_dispatch_turn_releases_the_instance():
    async def run():
        engine = _engine()
        await engine.instances.poll()
        group = _group("g1")
        engine.router.submit(group)
        sample = group.samples[0]
        engine._start(engine.router.launch(sample, 0, 8, 0.0))
        assert engine.views[0].inflight == 1
        engine.abort_sample(sample)  # before the chunk task has run a single step
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert sample.state == SampleState.ABORTED
        assert engine.views[0].inflight == 0 and not engine._chunk_tasks
        assert engine.instances.clients[0].chunks == 0  # it never reached the instance
        await engine.stop()

    asyncio.run(run())


def test_a_chunk_given_up_before_it_ran_is_sent_again():
    async def run():
        engine = _engine(2)
        await engine.instances.poll()
        group = _group("g2", n=1)
        engine.router.submit(group)
        sample = group.samples[0]
        engine._start(engine.router.launch(sample, 0, 8, 0.0))
        engine._given_up.add(sample.rid)  # what _watch_stall does for a stalled instance
        engine._chunk_tasks[sample.rid].cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert engine.views[0].inflight == 0
        assert sample.failures == 1 and sample.state == SampleState.PENDING  # back in the buffer
        assert engine.buffer.has_pending()
        await engine.stop()

    asyncio.run(run())


def test_the_router_prices_slo_requests_by_the_model_each_instance_decides_by():
    """An emulated instance decides by its profile, not by the fit of its padded steps: the router
    routes by the same model; an instance without one is priced by its fit."""
    import dataclasses

    from seer_sglang.core.step_model import emulated_model

    profile = emulated_model("h100-70b", 0.0125, 10.0)
    reports = {0: {"fit": {"base_s": 0.150, "per_seq_s": 0.0005}, "model": dataclasses.asdict(profile)},
               1: {"fit": {"base_s": 0.150, "per_seq_s": 0.0005}, "model": None}}

    class Reporting(SilentInstance):
        async def server_info(self):
            return {"internal_states": [{"seer_slo": reports[self.index]}]}

    async def run():
        engine = RolloutEngine([Reporting(i) for i in range(2)], WholeGroupPolicy(), poll_interval_s=3600)
        await engine.instances.read_slo_fits(engine.instances.clients)
        assert engine.views[0].step_s(1, 20) == profile.decode_step(1, 20)  # ~115 ms at batch 1
        assert engine.views[1].step_s(1, 20) == 0.150 + 0.0005
        await engine.stop()

    asyncio.run(run())


class CrashingInstance(SilentInstance):
    """Drops every chunk's connection mid-request, as an instance process that dies does."""

    async def generate(self, payload):
        from seer_sglang.frontend.instance_client import InstanceUnavailable

        self.chunks += 1
        raise InstanceUnavailable(f"{self.url}: RemoteProtocolError: Server disconnected", crashed=True)


def test_a_sample_that_two_instances_died_under_is_not_sent_to_a_third():
    async def run():
        clients = [CrashingInstance(i) for i in range(3)]
        engine = RolloutEngine(clients, WholeGroupPolicy(), poll_interval_s=3600)
        await engine.instances.poll()
        for view in engine.views:  # crashed instances come back up at once here: only the rule stops it
            view.healthy = True
        group = _group("poison", n=1)
        engine.router.submit(group)
        sample = group.samples[0]
        engine._start(engine.router.launch(sample, 0, 8, 0.0))
        for _ in range(5):
            await asyncio.sleep(0)
        assert sample.state == SampleState.PENDING and sample.crashed_on == [0]
        engine.views[0].healthy = True
        engine._start(engine.router.launch(sample, 1, 8, 0.0))
        for _ in range(5):
            await asyncio.sleep(0)
        assert sample.state == SampleState.FAILED and sample.error_status == 500
        assert "instances 0, 1 each failed" in sample.error
        assert not engine.buffer.has_pending() and sum(c.chunks for c in clients) == 2
        await engine.stop()

    asyncio.run(run())


def test_a_chunk_that_comes_back_clears_the_crash_count():
    """Losing one instance, then finishing a chunk elsewhere, starts the count again: a sample that
    outlives two separate failures of the deployment is not taken for the cause of them."""
    sample = _group("g3", n=1).samples[0]
    sample.crashed_on.append(0)
    engine = _engine(2)
    engine.router.submit(Group(group_id="g3", prompt_ids=[1, 2, 3], samples=[sample]))

    class Answering(SilentInstance):
        async def generate(self, payload):
            return {"output_ids": [7, 7], "meta_info": {"finish_reason": None}}

    engine.instances.clients[1] = Answering(1)

    async def run():
        await engine.instances.poll()
        engine._start(engine.router.launch(sample, 1, 2, 0.0))
        for _ in range(5):
            await asyncio.sleep(0)
        assert sample.crashed_on == [] and sample.output_ids == [7, 7]
        await engine.stop()

    asyncio.run(run())
