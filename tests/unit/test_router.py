"""The sans-IO router (``core.router``): its bookkeeping, and that it is the only copy of it."""

from __future__ import annotations

import ast
from pathlib import Path

from seer_sglang.core.policy import ChunkedPolicy, InstanceView, WholeGroupPolicy
from seer_sglang.core.request import Group, SampleState, SamplingParams
from seer_sglang.core.router import Launch, Load, Refusal, Router
from seer_sglang.core.slo import SLO, fitted_step_time

ROOT = Path(__file__).resolve().parents[2] / "seer_sglang"
# What only the router does: reserving and giving back KV on a view, moving samples in and out of the
# buffer, asking the policy and telling it of finished samples and groups.
BOOKKEEPING = {"claim", "release", "mark_running", "requeue", "finish", "add_group", "add_samples", "schedule",
               "on_sample_finished", "on_group_done"}


def _calls(path: Path) -> list[tuple[str, str]]:
    """(receiver's source, method) of every method call in the module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            out.append((ast.unparse(node.func.value), node.func.attr))
    return out


def test_the_frontend_and_the_simulator_drive_the_one_router_and_keep_no_bookkeeping_of_their_own():
    for path in (ROOT / "frontend" / "engine.py", ROOT / "sim" / "simulator.py"):
        calls = _calls(path)
        own = [f"{who}.{what}" for who, what in calls if what in BOOKKEEPING and not who.endswith("router")]
        assert not own, f"{path.name} keeps the router's bookkeeping itself: {own}"
        assert "Router(" in path.read_text()
        used = {what for who, what in calls if who.endswith("router")}
        assert {"chunk_ended", "requeue", "finish"} <= used, (path.name, used)
    for path in (ROOT / "frontend").rglob("*.py"):  # and no other frontend module does it either
        own = [f"{who}.{what}" for who, what in _calls(path) if what in {"claim", "release", "mark_running"}]
        assert not own, (path.name, own)


def _router(instances: int = 2, policy=None) -> Router:
    views = [InstanceView(i, capacity_tokens=10_000) for i in range(instances)]
    return Router(policy or ChunkedPolicy(chunk_size=4), views)


def _group(gid: str, n: int = 2, max_new: int = 8, slo: SLO | None = None) -> Group:
    return Group.make(gid, [1, 2, 3], n, SamplingParams(max_new_tokens=max_new, slo=slo))


def test_every_launch_reserves_and_its_end_gives_the_reservation_back():
    router = _router()
    group = _group("g")
    router.submit(group)
    launches = router.schedule(now=1.0).launches
    assert {launch.sample.rid for launch in launches} == {s.rid for s in group.samples}
    assert all(launch.max_new_tokens == 4 and launch.came == "first" for launch in launches)
    assert sum(v.inflight for v in router.views) == 2 and sum(v.reserved_tokens for v in router.views) > 0
    assert not router.buffer.has_pending() and all(s.state == SampleState.RUNNING for s in group.samples)
    for launch in launches:
        assert launch.chunk is launch.sample.chunks[-1] and launch.chunk.start == 1.0
        router.chunk_ended(launch, now=2.0)
        assert launch.chunk.end == 2.0
    assert all(v.inflight == 0 and v.reserved_tokens == 0 and not v.groups for v in router.views)


def test_a_requeued_sample_comes_back_and_its_next_chunk_says_whether_it_moved():
    router = _router(instances=1)
    group = _group("g", n=1)
    router.submit(group)
    (first,) = router.schedule(now=0.0).launches
    first.sample.output_ids.extend([7, 7, 7, 7])
    router.chunk_ended(first, now=1.0)
    router.requeue(first.sample)
    assert router.buffer.has_pending() and first.sample.state == SampleState.PENDING
    (second,) = router.schedule(now=1.0).launches
    assert second.came == "stayed" and second.chunk.context_tokens == 3 + 4
    second.sample.chunks[-1].instance = 5  # as if the earlier chunk had run elsewhere
    router.chunk_ended(second, now=2.0)
    router.requeue(second.sample)
    assert router.schedule(now=2.0).launches[0].came == "moved"


def test_finishing_the_last_sample_of_a_group_removes_it_and_tells_the_policy():
    seen = []

    class Recording(WholeGroupPolicy):
        def on_sample_finished(self, sample):
            seen.append(("sample", sample.rid))

        def on_group_done(self, group_id):
            seen.append(("group", group_id))

    router = _router(policy=Recording())
    group = _group("g")
    router.submit(group)
    launches = router.schedule(now=0.0).launches
    for launch in launches:
        router.chunk_ended(launch, now=1.0)
    assert router.finish(group.samples[0], SampleState.FINISHED, now=1.0) is None
    assert router.finish(group.samples[0], SampleState.ABORTED, now=2.0) is None  # already done: unchanged
    assert group.samples[0].state == SampleState.FINISHED and group.samples[0].finished_at == 1.0
    assert router.finish(group.samples[1], SampleState.FAILED, now=3.0) is group
    assert "g" not in router.buffer.groups
    assert seen == [("sample", group.samples[0].rid), ("sample", group.samples[1].rid), ("group", "g")]


def test_a_removed_instance_stays_down_whatever_it_reports_until_readmitted():
    router = _router()
    load = Load(capacity_tokens=500, used_tokens=10, running=1, waiting=0)
    router.remove_instance(1)
    assert router.instance_seen(1, load) is False and not router.views[1].healthy
    router.readmit(1)
    assert router.instance_seen(1, load) is True and router.views[1].capacity_tokens == 500
    assert router.instance_seen(0, None) is True and router.healthy_count() == 1
    router.submit(_group("g", n=4))
    assert {launch.instance for launch in router.schedule(now=0.0).launches} == {1}


def test_an_slo_sample_goes_whole_or_is_refused_with_the_reason():
    router = _router()
    for view in router.views:
        view.step_s = fitted_step_time(base_s=0.05, per_seq_s=0.0)  # every step takes 50 ms
    fits = _group("fits", n=1, max_new=32, slo=SLO(tpot_s=0.2))
    late = _group("late", n=1, max_new=32, slo=SLO(tpot_s=0.01))
    router.submit(fits)
    router.submit(late)
    decisions = router.schedule(now=0.0)
    (launch,) = decisions.launches
    assert isinstance(launch, Launch) and launch.sample is fits.samples[0] and launch.max_new_tokens == 32
    (refusal,) = decisions.refused
    assert isinstance(refusal, Refusal) and refusal.sample is late.samples[0] and "TPOT SLO of 10 ms" in refusal.reason
