"""Unit tests of the request model, buffer and the whole-group policy (no engines)."""

from seer_sglang.rollout.buffer import RequestBuffer
from seer_sglang.rollout.policy import InstanceView, WholeGroupPolicy, make_policy
from seer_sglang.rollout.request import Group, SampleState, SamplingParams

import pytest


def group(gid: str, n: int = 4, prompt_len: int = 10, max_new: int = 100, seed=None) -> Group:
    return Group.make(gid, list(range(prompt_len)), n, SamplingParams(max_new_tokens=max_new, seed=seed))


def test_group_make_splits_into_samples_with_one_probe():
    g = group("a", n=4)
    assert [s.rid for s in g.samples] == ["a-0", "a-1", "a-2", "a-3"]
    assert [s.is_probe for s in g.samples] == [True, False, False, False]
    assert all(s.remaining == 100 and s.context_ids == list(range(10)) for s in g.samples)


def test_sample_seeds_differ_across_siblings_and_reproduce_with_a_user_seed():
    g1, g2 = group("a", seed=7), group("b", seed=7)
    seeds = [s.sampling_seed for s in g1.samples]
    assert len(set(seeds)) == 4
    assert seeds == [s.sampling_seed for s in g2.samples]
    g1.samples[0].output_ids = [1, 2, 3]
    assert g1.samples[0].sampling_seed == seeds[0]  # constant across chunks
    unseeded = [s.sampling_seed for s in group("c").samples + group("d").samples]
    assert len(set(unseeded)) == 8 and all(0 <= x < 2**62 for x in unseeded)


def test_buffer_tracks_pending_running_and_finished():
    buf = RequestBuffer()
    g = group("a", n=2)
    buf.add_group(g)
    assert [s.rid for s in buf.pending()] == ["a-0", "a-1"]
    buf.mark_running(g.samples[0], instance=1)
    assert g.samples[0].state == SampleState.RUNNING and g.samples[0].instance == 1
    assert [s.rid for s in buf.pending()] == ["a-1"]
    buf.requeue(g.samples[0])
    assert {s.rid for s in buf.pending()} == {"a-0", "a-1"}
    buf.finish(g.samples[0])
    buf.finish(g.samples[1])
    assert g.done and not buf.has_pending()
    with pytest.raises(ValueError):
        buf.add_group(g)


def test_whole_group_goes_to_one_least_loaded_instance():
    buf = RequestBuffer()
    for gid in "abc":
        buf.add_group(group(gid, n=4, prompt_len=10, max_new=100))
    views = [InstanceView(0, capacity_tokens=10_000), InstanceView(1, capacity_tokens=10_000, reserved_tokens=50)]
    decisions = WholeGroupPolicy().schedule(buf, views)
    assert [d.instance for d in decisions] == [0, 1, 0]
    for d in decisions:
        assert len({s.group_id for s in d.samples}) == 1 and len(d.samples) == 4
        assert d.max_new_tokens == [100] * 4  # unchunked: the whole budget
    assert views[0].reserved_tokens == 2 * 4 * 110 and views[0].inflight == 8


def test_whole_group_skips_unhealthy_and_stops_without_instances():
    buf = RequestBuffer()
    buf.add_group(group("a"))
    views = [InstanceView(0, healthy=False), InstanceView(1)]
    assert [d.instance for d in WholeGroupPolicy().schedule(buf, views)] == [1]
    assert WholeGroupPolicy().schedule(buf, [InstanceView(0, healthy=False)]) == []


def test_make_policy_rejects_unknown_names():
    assert make_policy("group").name == "group"
    with pytest.raises(ValueError, match="unknown scheduler"):
        make_policy("nope")
