"""Unit tests of the request model, buffer and the whole-group policy (no engines)."""

import collections
import statistics

from seer_sglang.core.buffer import RequestBuffer
from seer_sglang.core.policy import BlindPowerOfTwoPolicy, InstanceView, RoundRobinPolicy, WholeGroupPolicy, make_policy
from seer_sglang.core.request import Group, SampleState, SamplingParams

import pytest


def group(gid: str, n: int = 4, prompt_len: int = 10, max_new: int = 100, seed=None) -> Group:
    return Group.make(gid, list(range(prompt_len)), n, SamplingParams(max_new_tokens=max_new, seed=seed))


def test_group_make_splits_into_samples_with_one_probe():
    g = group("a", n=4)
    assert [s.rid for s in g.samples] == ["a-0", "a-1", "a-2", "a-3"]
    assert [s.is_probe for s in g.samples] == [True, False, False, False]
    assert all(s.remaining == 100 and s.context_ids == list(range(10)) for s in g.samples)


def test_sample_seeds_differ_across_siblings_and_groups_and_reproduce_with_a_user_seed():
    g1, g2 = group("a", seed=7), group("b", seed=7)
    seeds = [s.sampling_seed for s in g1.samples]
    assert len(set(seeds)) == 4
    assert not set(seeds) & {s.sampling_seed for s in g2.samples}  # sibling i of another group: other noise
    assert seeds == [s.sampling_seed for s in group("a", seed=7).samples]  # same request, same seed: same draws
    assert seeds != [s.sampling_seed for s in group("a", seed=8).samples]
    g1.samples[0].output_ids = [1, 2, 3]
    assert g1.samples[0].sampling_seed == seeds[0]  # constant across chunks
    unseeded = [s.sampling_seed for s in group("c").samples + group("c").samples]
    assert len(set(unseeded)) == 8 and all(0 <= x < 2**62 for x in unseeded)  # no seed: fresh every time


def test_group_seed_key_is_stable_and_tells_prompts_and_positions_apart():
    from seer_sglang.core.request import group_seed_key

    assert group_seed_key([1, 2, 3], 0) == group_seed_key([1, 2, 3], 0)
    assert len({group_seed_key([1, 2, 3], 0), group_seed_key([1, 2, 3], 1), group_seed_key([1, 2, 4], 0),
                group_seed_key([12, 3], 0)}) == 4
    assert group_seed_key([1, 2, 3], 0, "q17") == group_seed_key([9], 5, "q17")  # a chosen id names the group
    make = lambda key: Group.make("g", [1, 2], 2, SamplingParams(max_new_tokens=4, seed=0), seed_key=key)
    assert [s.sampling_seed for s in make("at:0:x").samples] != [s.sampling_seed for s in make("at:1:x").samples]


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
    with pytest.raises(ValueError):  # a live group id is taken
        buf.add_group(group("a", n=1))
    assert buf.finish(g.samples[0]) is None  # a sibling is still live: the group stays
    assert "a" in buf.groups
    assert buf.finish(g.samples[1]) is g  # the last sample ends the group: it leaves the buffer
    assert g.done and not buf.has_pending() and "a" not in buf.groups


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
    # each group's prompt once (its samples share it in the radix cache), each sample's budget
    assert views[0].reserved_tokens == 2 * (10 + 4 * 100) and views[0].inflight == 8 and views[0].groups == {"a": 4, "c": 4}


def test_round_robin_deals_whole_groups_in_turn_whatever_the_load():
    """veRL's dispatch (the plain-SGLang baseline): group i to instance i mod K, even onto a loaded one."""
    buf = RequestBuffer()
    for gid in "abcde":
        buf.add_group(group(gid, n=2))
    views = [InstanceView(0, capacity_tokens=10_000, reserved_tokens=9_000), InstanceView(1, capacity_tokens=10_000)]
    policy = RoundRobinPolicy()
    assert [d.instance for d in policy.schedule(buf, views)] == [0, 1, 0, 1, 0]
    later = RequestBuffer()
    later.add_group(group("f", n=2))
    views[0].healthy = False
    assert [d.instance for d in policy.schedule(later, views)] == [1]


def placements(decisions) -> dict[str, int]:
    return {s.rid: d.instance for d in decisions for s in d.samples}


def test_per_sample_round_robin_spreads_each_groups_siblings():
    """slime's per-sample requests behind a round-robin balancer: sibling after sibling in turn, whole."""
    buf = RequestBuffer()
    for gid in "ab":
        buf.add_group(group(gid, n=3))
    views = [InstanceView(0, capacity_tokens=10_000), InstanceView(1, capacity_tokens=10_000)]
    decisions = make_policy("sample-round-robin").schedule(buf, views)
    assert placements(decisions) == {"a-0": 0, "a-1": 1, "a-2": 0, "b-0": 1, "b-1": 0, "b-2": 1}
    assert all(n == 100 for d in decisions for n in d.max_new_tokens)  # unchunked
    assert views[0].inflight == 3 and views[1].inflight == 3


def test_power_of_two_takes_the_instance_with_fewer_requests_in_flight():
    buf = RequestBuffer()
    buf.add_group(group("a", n=4))
    # with two instances both are always drawn: every request goes to the lighter one at that moment
    views = [InstanceView(0, capacity_tokens=10_000, inflight=3), InstanceView(1, capacity_tokens=10_000)]
    decisions = make_policy("sample-power-of-two").schedule(buf, views)
    assert list(placements(decisions).values())[:3] == [1, 1, 1]  # the fourth meets a tie: either
    assert abs(views[0].inflight - views[1].inflight) <= 1
    # with four, each pick is one of two drawn ones: never the busiest of all
    buf = RequestBuffer()
    buf.add_group(group("b", n=1))
    busy = [InstanceView(i, capacity_tokens=10_000, inflight=10 if i == 2 else 1) for i in range(4)]
    for seed in range(20):
        policy = make_policy("sample-power-of-two", seed=seed)
        assert placements(policy.schedule(buf, [v.snapshot() for v in busy]))["b-0"] != 2


def test_sglang_routers_power_of_two_in_front_of_sglang_places_at_random():
    """sglang-router 0.3.2's power_of_two reads every load as 0 in front of SGLang 0.5.23: the first of its
    two draws wins, whatever is in flight, so a burst spreads as uniform draws do, not evenly."""
    buf = RequestBuffer()
    buf.add_group(group("a", n=4))
    views = [InstanceView(0, capacity_tokens=10_000, inflight=50), InstanceView(1, capacity_tokens=10_000)]
    placed = placements(BlindPowerOfTwoPolicy(seed=3).schedule(buf, views))
    assert 0 in placed.values()  # the busy instance gets requests too
    burst = RequestBuffer()
    burst.add_group(group("b", n=256))
    spread = []
    for seed in range(10):
        views = [InstanceView(i, capacity_tokens=10**6) for i in range(4)]
        counts = collections.Counter(placements(BlindPowerOfTwoPolicy(seed=seed).schedule(burst, views)).values())
        spread.append(max(counts.values()) - min(counts.values()))
        balanced = [InstanceView(i, capacity_tokens=10**6) for i in range(4)]
        even = collections.Counter(placements(make_policy("sample-power-of-two", seed=seed)
                                              .schedule(burst, balanced)).values())
        assert max(even.values()) - min(even.values()) <= 6  # exact in-flight counts: nearly even
    assert statistics.fmean(spread) > 8  # uniform draws of 256 over 4: about 17 apart on average


def test_cache_aware_follows_the_longest_text_match_until_the_load_is_out_of_balance():
    """sglang-router's cache_aware: a request goes where the longest match of its text (ids joined by
    spaces) was sent, if it is over 30% of it, else to the instance with the fewest requests in flight;
    any request to the idlest once the busiest has more than 64 requests over it and 1.5 times as many."""
    def make(gid: str, n: int, prompt: list[int]) -> Group:
        return Group.make(gid, prompt, n, SamplingParams(max_new_tokens=100))

    template = [900 + i for i in range(8)]  # a chat template: 8 shared ids before each question
    buf = RequestBuffer()
    buf.add_group(make("a", 3, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]))
    buf.add_group(make("b", 2, [20, 21, 22]))
    buf.add_group(make("c", 1, [30, 31, 32]))
    views = [InstanceView(i, capacity_tokens=10_000) for i in range(3)]
    policy = make_policy("sample-cache-aware")
    # a's siblings follow a; b and c match nothing: each to the instance with the fewest in flight
    assert placements(policy.schedule(buf, views)) == {"a-0": 0, "a-1": 0, "a-2": 0, "b-0": 1, "b-1": 1, "c-0": 2}
    later = RequestBuffer()
    later.add_group(make("d", 1, template + [40]))
    later.add_group(make("e", 1, template + [50, 51]))  # shares 8 of its 10 ids with d: more than 30%
    assert placements(policy.schedule(later, views)) == {"d-0": 2, "e-0": 2}
    # a long text that matches nothing does not count against an instance: only its requests in flight
    views[2].inflight = 5
    other = RequestBuffer()
    other.add_group(make("f", 1, [60, 61]))
    assert placements(policy.schedule(other, views)) == {"f-0": 1}
    # out of balance: 100 in flight on 0, 20 on 2 (> 64 more, > 1.5x): group a's next sibling goes to 2
    more = RequestBuffer()
    more.add_group(make("a", 1, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]))
    views[0].inflight, views[1].inflight, views[2].inflight = 100, 30, 20
    assert placements(policy.schedule(more, views)) == {"a-0": 2}


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


# ---- divided rollout and context-aware policies ------------------------------------------------

from seer_sglang.core.policy import (ChunkedPolicy, ContextPolicy, GroupOraclePolicy, LateOraclePolicy,  # noqa: E402
                                     OraclePolicy)


def finish(policy, sample, length):
    sample.output_ids = [1] * length
    policy.on_sample_finished(sample)


def test_divided_sends_chunks_to_least_loaded_with_room():
    buf = RequestBuffer()
    g = group("a", n=4, prompt_len=10, max_new=100)
    g.samples[1].output_ids = [7] * 95  # only 5 tokens left
    buf.add_group(g)
    views = [InstanceView(0, capacity_tokens=1000), InstanceView(1, capacity_tokens=1000, reserved_tokens=100,
                                                                 inflight=1)]
    decisions = ChunkedPolicy(chunk_size=16).schedule(buf, views)
    placed = {s.rid: (d.instance, n) for d in decisions for s, n in zip(d.samples, d.max_new_tokens)}
    assert placed["a-0"][1] == 16 and placed["a-1"][1] == 5  # min(chunk, remaining)
    # Each goes where the load is least once it runs there, and a sibling already there holds the
    # prompt: a-1 joins a-0 on instance 0 (126 tokens there, against 100 + 10 + 100 on instance 1);
    # then a-2 pays the prompt on instance 1 (126 against 142) and a-3 evens out on instance 0.
    assert [placed[f"a-{i}"][0] for i in range(4)] == [0, 0, 1, 0]
    assert views[0].reserved_tokens == 10 + 16 + 100 + 16 and views[1].reserved_tokens == 100 + 10 + 16


def test_admission_keeps_kv_below_headroom_but_idle_instance_takes_one():
    buf = RequestBuffer()
    buf.add_group(group("a", n=8, prompt_len=100, max_new=1000))
    views = [InstanceView(0, capacity_tokens=1000)]
    decisions = ChunkedPolicy(chunk_size=200, kv_headroom=0.9).schedule(buf, views)
    # the shared prompt once, then 200 per sample: 100 + 4 * 200 <= 900 < 100 + 5 * 200
    assert sum(len(d.samples) for d in decisions) == 4
    assert views[0].reserved_tokens == 900 and views[0].groups == {"a": 4}
    big = RequestBuffer()
    big.add_group(group("b", n=2, prompt_len=5000, max_new=100))
    decisions = ChunkedPolicy(chunk_size=200).schedule(big, [InstanceView(0, capacity_tokens=1000)])
    assert sum(len(d.samples) for d in decisions) == 1  # too big for the headroom, but never stuck
    assert ChunkedPolicy().schedule(big, [InstanceView(0, healthy=False)]) == []


def test_a_headroom_above_one_commits_more_worst_cases_than_the_kv_holds():
    """A chunk's worst case (its whole budget) is rarely written: past 1, the headroom lets the in-flight
    worst cases exceed the instance's KV, and SGLang's own admission queues what does not fit."""
    def placed(headroom: float) -> int:
        buf = RequestBuffer()
        buf.add_group(group("a", n=16, prompt_len=100, max_new=1000))
        views = [InstanceView(0, capacity_tokens=1000)]
        decisions = ChunkedPolicy(chunk_size=200, kv_headroom=headroom).schedule(buf, views)
        assert views[0].reserved_tokens <= headroom * 1000
        return sum(len(d.samples) for d in decisions)

    assert (placed(0.9), placed(1.2), placed(2.0)) == (4, 5, 9)  # 100 + n * 200 within the headroom


def test_without_a_chunk_size_each_sample_is_divided_by_its_own_budget():
    """No ``--chunk-size``: a sample's chunks are an eighth of its max_new_tokens, never under 512, so a
    long budget is divided (its worst case is not reserved whole) and a short one runs undivided."""
    from seer_sglang.config import SCHEDULER

    buf = RequestBuffer()
    buf.add_group(group("long", n=2, max_new=32768))
    buf.add_group(group("mid", n=2, max_new=2048))
    buf.add_group(group("short", n=2, max_new=300))
    policy = ChunkedPolicy()
    assert policy.chunk_size is None and (SCHEDULER.auto_chunks, SCHEDULER.min_chunk) == (8, 512)
    decisions = policy.schedule(buf, [InstanceView(0, capacity_tokens=10**6)])
    budgets = {s.group_id: b for d in decisions for s, b in zip(d.samples, d.max_new_tokens)}
    assert budgets == {"long": 4096, "mid": 512, "short": 300}
    assert ChunkedPolicy(chunk_size=100).chunk_of(buf.groups["long"].samples[0]) == 100


def test_whole_tail_sends_the_remainder_only_when_every_waiting_sample_fits():
    """With ``whole_tail``, samples go for their whole remaining budget once all that waits fits in
    the instances' headroom; before that, and without the option, one chunk at a time."""
    def dispatch(policy, capacity):
        buf = RequestBuffer()
        buf.add_group(group("a", n=4, prompt_len=100, max_new=1000))
        return policy.schedule(buf, [InstanceView(0, capacity_tokens=capacity), InstanceView(1, capacity_tokens=capacity)])

    roomy = dispatch(ChunkedPolicy(chunk_size=200, kv_headroom=1.0, whole_tail=True), 2200)  # 4 x 1100 <= 2 x 2200
    assert sorted(b for d in roomy for b in d.max_new_tokens) == [1000] * 4
    tight = dispatch(ChunkedPolicy(chunk_size=200, kv_headroom=1.0, whole_tail=True), 2100)
    assert sorted(b for d in tight for b in d.max_new_tokens) == [200] * 4
    off = dispatch(ChunkedPolicy(chunk_size=200, kv_headroom=1.0), 2200)
    assert sorted(b for d in off for b in d.max_new_tokens) == [200] * 4
    assert make_policy("context", chunk_size=200, whole_tail=True).whole_tail


def test_context_probes_first_smallest_generated_first():
    buf = RequestBuffer()
    for gid, gen in (("a", 30), ("b", 10), ("c", 20)):
        g = group(gid, n=2, max_new=100)
        g.samples[0].output_ids = [1] * gen
        buf.add_group(g)
    order = [s.rid for s in ContextPolicy(chunk_size=8).order(buf.pending(), buf)]
    assert order[:3] == ["b-0", "c-0", "a-0"]
    assert set(order[3:]) == {"a-1", "b-1", "c-1"}


def test_context_lfs_by_group_estimate_and_estimate_updates():
    policy = ContextPolicy(chunk_size=8)
    buf = RequestBuffer()
    groups = {gid: group(gid, n=3, max_new=1000) for gid in "abc"}
    for g in groups.values():
        buf.add_group(g)
    assert policy.estimate(groups["a"].samples[1]) == 1000  # nothing finished: max_tokens
    finish(policy, groups["a"].samples[0], 50)
    buf.finish(groups["a"].samples[0])
    finish(policy, groups["b"].samples[0], 200)
    buf.finish(groups["b"].samples[0])
    finish(policy, groups["b"].samples[1], 120)  # shorter sibling does not lower the estimate
    buf.finish(groups["b"].samples[1])
    assert policy.estimate(groups["a"].samples[1]) == 50 and policy.estimate(groups["b"].samples[2]) == 200
    order = [s.rid for s in policy.order(buf.pending(), buf)]
    assert order == ["c-0", "c-1", "c-2", "b-2", "a-1", "a-2"]
    finish(policy, groups["a"].samples[1], 900)  # a longer sibling raises it
    assert policy.estimate(groups["a"].samples[2]) == 900
    policy.on_group_done("a")
    assert policy.estimate(groups["a"].samples[2]) == 1000


def test_context_spreads_equal_estimates_sibling_by_sibling_across_groups():
    """With no length known, the second samples of all groups go before any group's third."""
    buf = RequestBuffer()
    for gid in "abc":
        buf.add_group(group(gid, n=3, max_new=1000))
    order = [s.rid for s in ContextPolicy(chunk_size=8).order(buf.pending(), buf)]
    assert order == ["a-0", "b-0", "c-0", "a-1", "b-1", "c-1", "a-2", "b-2", "c-2"]


def short_waiting_then_long(policy: ContextPolicy, n_short: int, n_long: int) -> RequestBuffer:
    """A short group's siblings start waiting at clock 0; then a long group arrives. Both probes are
    done (10 and 900 tokens), so the long siblings rank first."""
    buf = RequestBuffer()
    short = group("short", n=n_short, max_new=1000)
    buf.add_group(short)
    finish(policy, short.samples[0], 10)
    buf.finish(short.samples[0])
    assert [s.rid for s in policy.order(buf.pending(), buf)] == [f"short-{i}" for i in range(1, n_short)]
    long_ = group("long", n=n_long, max_new=1000)
    finish(policy, long_.samples[0], 900)
    long_.samples[0].state = SampleState.FINISHED
    buf.add_group(long_)
    buf.finish(long_.samples[0])
    return buf


def test_context_starvation_bound_serves_the_oldest_waiter():
    policy = ContextPolicy(chunk_size=8, starvation_bound=3)
    buf = short_waiting_then_long(policy, n_short=2, n_long=4)
    first = policy.order(buf.pending(), buf)
    assert first[-1].rid == "short-1"  # lowest estimate: last
    for s in first[:3]:  # three dispatches go by while short-1 waits
        policy.on_dispatch(s)
        buf.mark_running(s, 0)
    assert [s.rid for s in policy.order(buf.pending(), buf)][0] == "short-1"


def test_oracle_orders_by_true_remaining_length():
    buf = RequestBuffer()
    buf.add_group(Group.make("a", [1, 2], 3, SamplingParams(max_new_tokens=1000), oracle_lengths=[100, 900, 50]))
    buf.add_group(Group.make("b", [1, 2], 2, SamplingParams(max_new_tokens=1000), oracle_lengths=[400, 10]))
    buf.groups["a"].samples[1].output_ids = [1] * 600  # 300 left
    order = [s.rid for s in OraclePolicy(chunk_size=8).order(buf.pending(), buf)]
    assert order == ["b-0", "a-1", "a-0", "a-2", "b-1"]
    assert ContextPolicy().order(buf.pending(), buf)[0].rid in ("a-0", "b-0")  # others ignore oracle_length


def test_group_oracle_serves_groups_by_their_true_longest_sample():
    """Every sample of the group with the longest true sample first, whatever its own length; no probes."""
    buf = RequestBuffer()
    buf.add_group(Group.make("a", [1, 2], 3, SamplingParams(max_new_tokens=1000), oracle_lengths=[100, 900, 50]))
    buf.add_group(Group.make("b", [1, 2], 2, SamplingParams(max_new_tokens=1000), oracle_lengths=[400, 10]))
    policy = GroupOraclePolicy(chunk_size=8)
    assert [s.rid for s in policy.order(buf.pending(), buf)] == ["a-0", "a-1", "a-2", "b-0", "b-1"]
    buf.groups["a"].samples[1].output_ids = [1] * 600  # progress does not move a group
    for s in buf.groups["b"].samples:
        s.output_ids = [1] * 5
    assert [s.rid for s in policy.order(buf.pending(), buf)][:3] == ["a-0", "a-1", "a-2"]
    assert make_policy("group-oracle", chunk_size=8).chunk_size == 8


def test_late_oracle_knows_a_groups_true_longest_sample_once_a_sibling_finishes():
    """Probes first, as in context; a group with nothing finished counts as max_tokens; once one
    sample has finished, the group ranks by its true longest sample, not by the finished one."""
    buf = RequestBuffer()
    buf.add_group(Group.make("a", [1, 2], 3, SamplingParams(max_new_tokens=1000), oracle_lengths=[100, 900, 50]))
    buf.add_group(Group.make("b", [1, 2], 3, SamplingParams(max_new_tokens=1000), oracle_lengths=[400, 10, 20]))
    buf.add_group(Group.make("c", [1, 2], 2, SamplingParams(max_new_tokens=1000), oracle_lengths=[600, 30]))
    policy = LateOraclePolicy(chunk_size=8)
    assert [s.rid for s in policy.order(buf.pending(), buf)][:3] == ["a-0", "b-0", "c-0"]  # probes
    for gid in "ab":  # a's and b's probes finish short; c's runs on
        finish(policy, buf.groups[gid].samples[0], buf.groups[gid].samples[0].oracle_length)
        buf.finish(buf.groups[gid].samples[0])
    order = [s.rid for s in policy.order(buf.pending(), buf)]
    assert order == ["c-0", "c-1", "a-1", "a-2", "b-1", "b-2"]  # c unknown (1000), a 900 > b 400
    context = ContextPolicy(chunk_size=8)  # the same information without the true lengths: a's 100 < b's 400
    for gid in "ab":
        context.on_sample_finished(buf.groups[gid].samples[0])
    assert [s.rid for s in context.order(buf.pending(), buf)][2:] == ["b-1", "b-2", "a-1", "a-2"]
    assert make_policy("late-oracle", chunk_size=8).chunk_size == 8


def test_context_dispatch_priorities_follow_the_order():
    buf = RequestBuffer()
    buf.add_group(group("a", n=3, max_new=100))
    (d,) = ContextPolicy(chunk_size=8).schedule(buf, [InstanceView(0, capacity_tokens=10_000)])
    assert [s.rid for s in d.samples] == ["a-0", "a-1", "a-2"] and d.priorities == sorted(d.priorities, reverse=True)
    assert len(set(d.priorities)) == 3


def test_context_priorities_compare_across_dispatch_calls():
    """A chunk sent later joins a queue of chunks sent earlier: its priority is its rank key's, not its
    place in its own call, so a long group's continuation goes before a short group's first chunks."""
    def priorities(groups, finished=()):
        policy, buf = ContextPolicy(chunk_size=8), RequestBuffer()
        for g in groups:
            buf.add_group(g)
        for sample, length in finished:
            sample.output_ids = [0] * length
            policy.on_sample_finished(sample)
        ds = policy.schedule(buf, [InstanceView(0, capacity_tokens=100_000)])
        return {s.rid: p for d in ds for s, p in zip(d.samples, d.priorities)}

    a, b = group("a", n=4, max_new=100), group("b", n=4, max_new=100)
    both, alone = priorities([a, b]), priorities([group("b", n=4, max_new=100)])
    assert {rid: both[rid] for rid in alone} == alone  # the same whatever else the call ranks
    short = priorities([group("a", n=4, max_new=100), group("b", n=4, max_new=100)],
                       finished=[(group("a", n=1).samples[0], 10)])
    assert short["b-1"] > short["a-1"] and short["a-0"] > short["b-1"]  # probes first, then by estimate
    assert min(short.values()) >= 0 and max(short.values()) < 2**63  # SGLang's int64 priority field


def test_rank_priority_orders_as_the_rank_key():
    import random

    from seer_sglang.core.policy import rank_priority

    rng = random.Random(3)
    keys = [tuple(rng.randint(-5000, 5000) for _ in range(rng.randint(1, 3))) for _ in range(500)]
    keys = [(k + (0,) * (3 - len(k))) for k in keys]  # shorter keys pad with zeros, as rank_priority does
    assert sorted(keys) == sorted(keys, key=rank_priority, reverse=True)
    assert rank_priority((1, 0)) > rank_priority((2, -100, 0)) > rank_priority((2, -50, 0)) > rank_priority((2, -50, 3))


def test_make_policy_passes_only_known_options():
    p = make_policy("context", chunk_size=16, starvation_bound=5, kv_headroom=None)
    assert (p.name, p.chunk_size, p.starvation_bound, p.kv_headroom) == ("context", 16, 5, 1.2)
    assert make_policy("group", chunk_size=16).name == "group"


def test_instance_queue_follows_router_priority_and_keeps_siblings_together():
    from types import SimpleNamespace as Req

    from seer_sglang.plugin.queue_order import length_context_order

    queue = [Req(rid="plain-request", priority=None), Req(rid="gA-1-c0", priority=3),
             Req(rid="gB-0-c2", priority=9), Req(rid="gA-0-c1", priority=5), Req(rid="gB-2-c0", priority=1)]
    order = [r.rid for r in length_context_order(queue)]
    assert order == ["gB-0-c2", "gB-2-c0", "gA-0-c1", "gA-1-c0", "plain-request"]
    assert length_context_order([Req(rid="x", priority=None), Req(rid="y", priority=None)]) is None


def test_continuation_stays_on_its_instance_unless_much_less_loaded_elsewhere():
    from seer_sglang.core.request import ChunkRecord

    def pick(prev_reserved):
        buf = RequestBuffer()
        g = group("a", n=1, prompt_len=10, max_new=100)
        g.samples[0].chunks.append(ChunkRecord(instance=1, start=0.0, max_new_tokens=16))
        buf.add_group(g)
        views = [InstanceView(0, capacity_tokens=1000, reserved_tokens=100, inflight=1),
                 InstanceView(1, capacity_tokens=1000, reserved_tokens=prev_reserved, inflight=1)]
        (d,) = ChunkedPolicy(chunk_size=16, affinity_slack=0.05).schedule(buf, views)
        return d.instance

    assert pick(140) == 1  # within the slack: stay, its KV is cached there
    assert pick(300) == 0  # far more loaded: move


def test_a_new_turn_goes_where_its_trajectory_ran_when_that_instance_has_room():
    def pick(affinity, prev_reserved):
        buf = RequestBuffer()
        g = group("t", n=1, prompt_len=10, max_new=100)
        g.samples[0].affinity = affinity
        buf.add_group(g)
        views = [InstanceView(0, capacity_tokens=1000, reserved_tokens=100, inflight=1),
                 InstanceView(1, capacity_tokens=1000, reserved_tokens=prev_reserved, inflight=1)]
        (d,) = ChunkedPolicy(chunk_size=16, affinity_slack=0.05).schedule(buf, views)
        return d.instance

    assert pick(None, 140) == 0  # no trajectory: the least loaded
    assert pick(1, 140) == 1  # its last turn's prefix is cached there, and it has room
    assert pick(1, 300) == 0  # far more loaded: elsewhere
    assert pick(7, 140) == 0  # an instance that is gone


def test_a_sample_tracks_the_weight_versions_of_its_tokens_and_restarts_clean():
    sample = group("w", n=1, seed=3).samples[0]
    seed = sample.sampling_seed
    sample.output_ids, sample.logprobs = [1, 2, 3], [-0.1, -0.2, -0.3]
    assert not sample.add_versions([("v1", 0, 2)]) and not sample.add_versions([("v1", 2, 3)])
    assert sample.token_versions == [("v1", 0, 3)] and sample.weight_version == "v1"
    sample.output_ids += [4, 5]
    assert sample.add_versions([("v2", 3, 5)])  # now two versions
    assert sample.token_versions == [("v1", 0, 3), ("v2", 3, 5)] and sample.weight_version == "v2"
    sample.finish_reason = "length"
    sample.restart()
    assert sample.output_ids == [] and sample.logprobs == [] and sample.token_versions == []
    assert sample.finish_reason is None and sample.regenerations == 1 and sample.weight_version is None
    assert sample.sampling_seed == seed  # the same draws again, on the new weights


def test_chunks_end_where_the_kept_kv_fills_whole_pages():
    """With 16-token pages, every chunk but the last leaves prompt + generated = 1 (mod 16): the
    instance keeps KV for all but the last token, whole pages, so a continuation recomputes one token."""
    from seer_sglang.core.policy import chunk_tokens

    group = Group.make("g", list(range(700)), 1, SamplingParams(max_new_tokens=200))
    sample = group.samples[0]
    ends = []
    while sample.remaining:
        budget = chunk_tokens(sample, 32, page_size=16)
        assert 1 <= budget <= 32
        sample.output_ids += [0] * budget
        ends.append(sample.context_len)
    assert all((end - 1) % 16 == 0 for end in ends[:-1]) and ends[-1] == 900
    assert chunk_tokens(sample, 32, page_size=1) == 0  # finished
    fresh = Group.make("h", list(range(700)), 1, SamplingParams(max_new_tokens=200)).samples[0]
    assert chunk_tokens(fresh, 32) == 32 and chunk_tokens(fresh, 8, page_size=16) == 8  # no pages / chunk < page
    assert chunk_tokens(fresh, None, page_size=16) == 200


def test_a_sibling_waits_a_batch_when_its_uncached_prompt_is_computed_by_another():
    from types import SimpleNamespace as Req

    from seer_sglang.plugin.queue_order import shares_uncached_prefill

    prompt = list(range(100, 800))
    first = Req(rid="g1-0-c0", origin_input_ids=prompt, prefix_len=0)
    sibling = Req(rid="g1-1-c0", origin_input_ids=prompt, prefix_len=0)
    assert shares_uncached_prefill(sibling, [first])
    assert not shares_uncached_prefill(Req(rid="g2-0-c0", origin_input_ids=prompt, prefix_len=0), [first])  # other group
    assert not shares_uncached_prefill(Req(rid="plain", origin_input_ids=prompt, prefix_len=0), [first])  # not ours
    cached = Req(rid="g1-2-c0", origin_input_ids=prompt, prefix_len=688)  # prompt in the cache: nothing to share
    assert not shares_uncached_prefill(cached, [first])
    # continuations of two siblings: their uncached parts are their own generated tokens
    a = Req(rid="g1-0-c3", origin_input_ids=prompt + [1] * 64, prefix_len=704)
    b = Req(rid="g1-1-c3", origin_input_ids=prompt + [2] * 64, prefix_len=704)
    assert not shares_uncached_prefill(b, [a])


def test_a_sibling_waits_for_a_prefill_still_in_flight():
    """Under SGLang's overlap schedule the last prefill batch is in the running batch before its result
    (no output token yet) caches its prompts: a sibling waits for it, not for a sibling long past it."""
    from types import SimpleNamespace as Req

    from seer_sglang.plugin.queue_order import in_flight_by_group, shares_uncached_prefill

    prompt = list(range(100, 800))
    computing = Req(rid="g1-0-c0", origin_input_ids=prompt, prefix_len=0, output_ids=[])
    decoding = Req(rid="g2-0-c0", origin_input_ids=prompt, prefix_len=0, output_ids=[7])
    plain = Req(rid="plain", origin_input_ids=prompt, prefix_len=0, output_ids=[])
    adder = Req(running_batch=Req(reqs=[computing, decoding, plain]), can_run_list=[])
    found = in_flight_by_group(adder)
    assert found == {"g1": [computing]}
    assert in_flight_by_group(adder) is found  # once per prefill batch
    assert shares_uncached_prefill(Req(rid="g1-3-c0", origin_input_ids=prompt, prefix_len=0), found["g1"])
    assert "g2" not in found  # its prompt is cached: a sibling's prefix match covers it
    assert in_flight_by_group(Req(running_batch=None, can_run_list=[])) == {}


def test_a_groups_prompt_is_reserved_once_per_instance_while_any_sibling_runs_there():
    """SGLang's radix cache holds a prompt once for all the siblings running on an instance, so the
    router reserves it once: with the first sibling, and it is given back with the last one."""
    a, b = group("a", n=3, prompt_len=50), group("b", n=1, prompt_len=70)
    view = InstanceView(0, capacity_tokens=1000)
    a.samples[2].output_ids = [5] * 20
    assert view.claim_tokens(a.samples[0], 16) == 50 + 16
    own = [view.claim(a.samples[0], 16), view.claim(a.samples[1], 16), view.claim(a.samples[2], 16),
           view.claim(b.samples[0], 8)]
    assert own == [16, 16, 20 + 16, 8]
    assert view.claim_tokens(a.samples[1], 16) == 16  # a sibling holds the prompt here
    assert view.reserved_tokens == 50 + 16 + 16 + 36 + 70 + 8 and view.inflight == 4
    plan = view.snapshot()
    plan.claim(b.samples[0], 8)
    assert view.groups == {"a": 3, "b": 1}  # planning on a snapshot leaves the view alone
    view.release(a.samples[0], own[0])
    view.release(a.samples[2], own[2])
    assert view.reserved_tokens == 50 + 16 + 70 + 8  # the prompt stays while a-1 runs
    view.release(a.samples[1], own[1])
    view.release(b.samples[0], own[3])
    assert view.reserved_tokens == 0 and view.inflight == 0 and view.groups == {}


def test_context_starvation_turns_come_one_at_a_time():
    """When most waiting samples are past the bound (a working set twice the KV), one of them goes
    first per ``starvation_bound`` dispatches; the rest keep the length order."""
    policy = ContextPolicy(chunk_size=8, starvation_bound=2)
    buf = short_waiting_then_long(policy, n_short=4, n_long=5)

    def dispatch_first():
        first = policy.order(buf.pending(), buf)[0]
        policy.on_dispatch(first)
        buf.mark_running(first, 0)
        return first.rid

    assert [s.rid for s in policy.order(buf.pending(), buf)][:4] == ["long-1", "long-2", "long-3", "long-4"]
    assert dispatch_first() == "long-1" and dispatch_first() == "long-2"  # clock 2: short-1 is due its turn
    assert dispatch_first() == "short-1"
    # short-2 and short-3 are past the bound too, but each waits for the next turn, two dispatches on
    assert [dispatch_first() for _ in range(4)] == ["long-3", "short-2", "long-4", "short-3"]
