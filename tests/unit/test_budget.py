"""Adaptive draft budget: cost-model fit and best gamma, greedy allocation with priorities, switch-off
rules, and the fixed-threshold policy, on hand-checked numbers."""

from __future__ import annotations

import dataclasses

import pytest

from seer_sglang.speculative.budget import BudgetRequest, CostModel, DraftBudget, ThresholdSwitch

# t(B, n) = 10 ms + 1 ms per verified token; each draft token accepted with probability 1/2, 1/4, ...
COST = CostModel(base_s=0.010, per_seq_s=0.0, per_token_s=0.001, accept_curve=CostModel.geometric_curve(0.5))


def test_step_time_and_expected_tokens():
    assert COST.step_time(4, 3) == pytest.approx(0.010 + 0.001 * 12)
    assert COST.expected_accepted(3) == pytest.approx(0.875)
    assert COST.expected_accepted(2, scores=[0.9, 0.6, 0.1]) == pytest.approx(1.5)
    assert COST.expected_accepted(20) == pytest.approx(sum(0.5 ** i for i in range(1, 9)))
    # B = 1, gamma = 2: 1.75 expected tokens in 13 ms
    assert COST.tokens_per_second(1, 2) == pytest.approx(1.75 / 0.013)


def test_best_gamma_shrinks_with_batch_size():
    # B = 1: gamma 0..3 give 90.9, 125, 134.6, 133.9 tokens/s -> 2
    assert COST.best_gamma(1) == 2
    # B = 100: 1 / 0.11 = 9.09 per request beats 1.5 / 0.21 = 7.14 -> no speculation
    assert COST.best_gamma(100) == 0
    gammas = [COST.best_gamma(b) for b in (1, 2, 4, 8, 16, 32, 64)]
    assert gammas == sorted(gammas, reverse=True) and gammas[0] > gammas[-1]
    assert COST.best_gamma(1, gamma_max=1) == 1


def test_fit_recovers_the_linear_model():
    true = CostModel(0.012, 4e-5, 2e-6, (0.6,))
    points = [(b, n, true.step_time(b, n)) for b in (1, 8, 64, 256) for n in (1, 3, 9)]
    fit = CostModel.fit(points, [0.6])
    assert fit.base_s == pytest.approx(0.012, rel=1e-6)
    assert fit.per_seq_s == pytest.approx(4e-5, rel=1e-6)
    assert fit.per_token_s == pytest.approx(2e-6, rel=1e-6)
    assert fit.accept_curve == (0.6,)
    assert fit.verify_base_s == pytest.approx(0, abs=1e-12) and fit.verify_per_seq_s == pytest.approx(0, abs=1e-12)


def test_fit_separates_the_verify_overhead_from_plain_decode_steps():
    """Plain decode steps (one token per request) skip the verify machinery; the fit prices it apart."""
    true = CostModel(0.012, 4e-5, 2e-6, (0.6,), verify_base_s=0.005, verify_per_seq_s=3e-4)
    points = [(b, n, true.step_time(b, n)) for b in (1, 8, 64, 256) for n in (1, 2, 3, 9)]
    fit = CostModel.fit(points, [0.6])
    for name in ("base_s", "per_seq_s", "per_token_s", "verify_base_s", "verify_per_seq_s"):
        assert getattr(fit, name) == pytest.approx(getattr(true, name), rel=1e-4), name


def test_verify_overhead_turns_speculation_off():
    """A verify step without the overhead would pay at batch 8 (gamma* 2); with it, plain decode wins."""
    cheap = CostModel(0.010, 0.0, 0.001, CostModel.geometric_curve(0.5))
    costly = CostModel(0.010, 0.0, 0.001, CostModel.geometric_curve(0.5), verify_base_s=0.004, verify_per_seq_s=0.002)
    assert cheap.best_gamma(8) > 0
    assert costly.step_time(8, 1) == cheap.step_time(8, 1)  # plain decode pays no verify overhead
    assert costly.best_gamma(8) == 0 and costly.best_gamma(1) > 0


def test_allocation_is_greedy_by_weighted_score():
    budget = DraftBudget(COST, gamma_max=8, lam=2.0)  # batch 2 -> gamma* = 2, total 4
    assert budget.gamma_star(2) == 2
    reqs = [BudgetRequest("a", True, [0.4, 0.3, 0.2]), BudgetRequest("b", False, [0.7, 0.55, 0.5, 0.45])]
    # weighted: a 0.8, 0.6, 0.4; b 0.7, 0.55, 0.5 -> picks a .8, b .7, a .6, b .55
    d = budget.allocate(reqs)
    assert d.enabled and d.gamma_star == 2 and d.per_request == {"a": 2, "b": 2}
    # without the priority weight the low-priority request's better drafts take the whole budget
    d = DraftBudget(COST, lam=1.0).allocate(reqs)
    assert d.per_request == {"a": 0, "b": 4}


def test_allocation_respects_caps_and_zero_scores():
    budget = DraftBudget(COST, gamma_max=2, lam=2.0)
    # batch 1 -> gamma* = 2 (capped by gamma_max), total 2; only one non-zero score is available
    d = budget.allocate([BudgetRequest("a", False, [0.9, 0.0, 0.8])])
    assert d.per_request == {"a": 1} and d.enabled
    d = budget.allocate([BudgetRequest("a", False, [0.9, 0.9, 0.9, 0.9])])
    assert d.per_request == {"a": 2}
    # a longer batch than the candidate list: the budget counts the whole batch
    d = budget.allocate([BudgetRequest("a", False, [0.9] * 8)], batch_size=2)
    assert d.gamma_star == 2 and d.per_request == {"a": 2}


def test_speculation_off_at_large_batch():
    reqs = [BudgetRequest(str(i), i % 2 == 0, [0.9, 0.8]) for i in range(100)]
    d = DraftBudget(COST).allocate(reqs)
    assert not d.enabled and d.gamma_star == 0 and set(d.per_request.values()) == {0}
    assert "best gamma is 0" in d.reason


def test_speculation_off_when_budget_below_high_priority_count():
    reqs = [BudgetRequest(str(i), True, [0.9]) for i in range(5)]
    d = DraftBudget(COST).allocate(reqs, batch_size=2)  # gamma* 2 -> budget 4 < 5 long-tail requests
    assert not d.enabled and d.gamma_star == 2 and set(d.per_request.values()) == {0}
    assert "budget 4 < 5" in d.reason
    assert DraftBudget(COST).allocate(reqs[:4], batch_size=2).enabled


def test_threshold_switch():
    policy = ThresholdSwitch(gamma=3, max_batch=2)
    reqs = [BudgetRequest("a", False, [0.5] * 5), BudgetRequest("b", True, [0.5])]
    d = policy.allocate(reqs)
    assert d.enabled and d.per_request == {"a": 3, "b": 1} and d.gamma_star == 3
    d = policy.allocate(reqs + [BudgetRequest("c", False, [0.5] * 5)])
    assert not d.enabled and d.per_request == {"a": 0, "b": 0, "c": 0}


def test_online_cost_fits_its_own_steps_and_acceptance():
    from seer_sglang.speculative.budget import OnlineCost

    online = OnlineCost(gamma_max=4, min_points=8)
    for i in range(7):
        online.record_step(1 + i % 3, 3, COST.step_time(1 + i % 3, 3))
    assert online.model() is None  # too few points, and one width only
    for b, n in [(1, 1), (2, 5), (3, 2), (4, 4), (2, 1)]:
        online.record_step(b, n, COST.step_time(b, n))
    # per request and step: drafts verified, drafts accepted
    online.record_acceptance([4, 4, 2, 0], [2, 1, 2, 0])
    assert online.curve() == pytest.approx((1.0, 2 / 3, 0.0, 0.0))
    model = online.model()
    assert model.per_token_s == pytest.approx(COST.per_token_s) and model.base_s == pytest.approx(COST.base_s)
    assert model.accept_curve == pytest.approx((1.0, 2 / 3, 0.0, 0.0))
    online.record_acceptance([1], [0])  # position 1 now accepted 3 of 4 times; the curve never rises
    fade = 0.5 ** (1 / OnlineCost.ACCEPT_HALF_LIFE)  # the earlier step's counts faded by one request
    assert online.curve()[:2] == pytest.approx((3 * fade / (3 * fade + 1), 2 / 3))


def test_online_acceptance_follows_the_current_text_not_the_warm_up():
    """A warm-up on text the drafter cannot predict (nothing accepted) is followed by a rollout whose
    drafts are mostly accepted: within a few hundred requests the curve reads the rollout's acceptance,
    where lifetime counts would still average in the warm-up."""
    from seer_sglang.speculative.budget import OnlineCost

    online = OnlineCost(gamma_max=4, min_points=8)
    for _ in range(50):
        online.record_acceptance([4] * 32, [0] * 32)  # 1,600 requests, none accepted
    assert online.curve()[0] == 0.0
    for _ in range(20):
        online.record_acceptance([4] * 32, [3] * 32)  # 640 requests, three of four drafts accepted
    lifetime = 640 / (1600 + 640)
    curve = online.curve()
    assert curve[0] > 0.58 > 2 * lifetime  # half-life 512: the warm-up weighs 0.39 of the counts
    assert curve[3] < 0.01  # the fourth draft was never accepted


def test_online_cost_per_batch_keeps_every_batch_size_through_a_long_run_at_one():
    """With per_batch, a rollout's thousands of steps at one batch size leave the few steps at other
    sizes in the window, so the fit still tells the fixed cost from the per-sequence one."""
    from seer_sglang.speculative.budget import OnlineCost

    online = OnlineCost(min_points=4, min_widths=1, per_batch=3)
    for b in (1, 2):
        online.record_step(b, 1.0, 0.010 + 0.001 * b)
    for _ in range(500):
        online.record_step(64, 1.0, 0.010 + 0.001 * 64)
    assert online.mean_step_s() == pytest.approx({1: 0.011, 2: 0.012, 64: 0.074})
    assert len(online.points) == 5  # 1 + 1 + the last 3 at 64
    fit = online.model()
    assert fit.base_s + fit.per_seq_s + fit.per_token_s == pytest.approx(0.011)  # a step of one sequence


def test_adaptive_budget_profiles_short_drafts_until_it_has_a_model():
    from seer_sglang.speculative.budget import AdaptiveBudget

    budget = AdaptiveBudget(gamma_max=3)
    profiled = [budget.gamma_star(2) for _ in range(8)]
    assert set(profiled) == {0, 1, 2, 3} and max(profiled) == 3  # lengths cycle, capped at gamma_max
    reqs = [BudgetRequest("a", False, [0.9, 0.5, 0.2, 0.1]), BudgetRequest("b", False, [0.4])]
    decision = budget.allocate(reqs)
    assert decision.reason == "profiling"
    assert decision.per_request == {"a": decision.gamma_star, "b": min(1, decision.gamma_star)}
    for b, n in [(1, 1), (2, 4), (3, 2), (4, 3)] * 8:
        budget.online.record_step(b, n, COST.step_time(b, n))
    budget.online.record_acceptance([3], [3])
    decision = budget.allocate(reqs)  # fitted: COST's step times with drafts always accepted -> gamma* 3 at B = 2
    always = CostModel(COST.base_s, COST.per_seq_s, COST.per_token_s, (1.0, 1.0, 1.0))
    assert decision.gamma_star == always.best_gamma(2, 3) == 3 and decision.per_request == {"a": 3, "b": 1}
    assert [budget.gamma_star(b) for b in (1, 2, 400)] == [always.best_gamma(b, 3) for b in (1, 2, 400)]
    fixed = AdaptiveBudget(COST, gamma_max=8)
    assert fixed.online is None and fixed.allocate(reqs).gamma_star == COST.best_gamma(2)


def test_online_budget_explores_other_lengths_within_its_time_share():
    """The online fit sees only the steps it chose, so now and then a step tries another length: at most
    every EXPLORE_EVERY steps, and only as often as EXPLORE_SHARE of the expected step time pays for the
    time exploring is expected to lose. A wide verify of a large batch costs more, so it comes rarer."""
    from seer_sglang.speculative.budget import AdaptiveBudget, exploration_loss

    every, share = AdaptiveBudget.EXPLORE_EVERY, AdaptiveBudget.EXPLORE_SHARE

    def never_accepted() -> AdaptiveBudget:
        budget = AdaptiveBudget(gamma_max=8)
        for b, n in [(1, 1), (8, 4), (8, 2), (8, 1)] * 8:  # drafts never accepted: plain decode is best
            budget.online.record_step(b, n, COST.step_time(b, n))
        budget.online.record_acceptance([3], [0])
        return budget

    off = never_accepted()
    model = off.current_model()
    assert model.best_gamma(8) == model.best_gamma(1) == 0
    steps = 4000
    picks = [off.gamma_star(8) for _ in range(steps)]
    tried = [(i, p) for i, p in enumerate(picks) if p]
    assert sorted({p for _, p in tried}) == [1, 2, 4, 8]
    assert all(b - a >= every for (a, _), (b, _) in zip(tried, tried[1:]))
    lost = sum(exploration_loss(model, 8, 0, p) for _, p in tried)
    assert 0 < lost <= share * steps * model.step_time(8, 1)
    assert len(tried) < steps / every / 2  # a wide verify of 8 costs up to 4 plain steps: rarer than every 16
    small = never_accepted()
    assert sum(1 for _ in range(steps) if small.gamma_star(1)) > len(tried)  # batch of 1: cheaper, more often

    on = AdaptiveBudget(gamma_max=8)
    for b, n in [(1, 1), (1, 2), (1, 3), (1, 5)] * 8:  # drafts always accepted at batch 1: all of them pay
        on.online.record_step(b, n, COST.step_time(b, n))
    on.online.record_acceptance([4], [4])
    chosen = CostModel(COST.base_s, COST.per_seq_s, COST.per_token_s, (1.0,) * 4 + (0.0,) * 4).best_gamma(1, 8)
    picks = [on.gamma_star(1) for _ in range(steps)]
    others = [p for p in picks if p != chosen]
    assert chosen == 4 and set(others) == {0, 8} and 0 < len(others) <= steps / every
    assert sum(exploration_loss(on.current_model(), 1, chosen, p) for p in others) <= \
        share * steps * on.current_model().step_time(1, chosen + 1)
    fixed = AdaptiveBudget(COST, gamma_max=8)  # a fixed profile never explores
    assert {fixed.gamma_star(100) for _ in range(2 * every)} == {COST.best_gamma(100)}


def test_profiles_load_from_cost_or_step_model_files(tmp_path):
    from seer_sglang.core.step_model import load_profile
    from seer_sglang.speculative.budget import load_cost, make_budget

    path = tmp_path / "step.json"
    fitted = load_profile("cpu-smollm2")  # linear in batch and KV, as fitted on a CPU
    fitted.save(path)
    cost = load_cost(str(path))
    # a one-token verify step costs what the step model's decode step costs
    assert cost.step_time(8, 1) == pytest.approx(fitted.decode_step(8, 0))
    # a GPU profile keeps its roofline: a verify step of every width costs what the profile's step of
    # that many tokens costs (KV read aside), so drafts are free until their compute passes the weight read
    dense = load_profile("h100-70b")
    dense.save(path)
    cost = load_cost(str(path))
    for batch in (1, 8, 64, 256):
        for width in (1, 3, 9):
            assert cost.step_time(batch, width) == pytest.approx(dense.decode_step(batch, 0, batch * width))
    assert cost.step_time(8, 9) == pytest.approx(cost.step_time(8, 1))  # memory-bound: drafts ride free
    assert cost.step_time(256, 9) > 2 * cost.step_time(256, 1)  # compute-bound: they do not
    assert cost.accept_curve == CostModel.geometric_curve(0.6)
    assert make_budget("full", 5).allocate([BudgetRequest("a", False, [0.1] * 9)], 10_000).per_request == {"a": 5}
    assert not make_budget("threshold", 5).allocate([BudgetRequest("a", False, [0.1])], 64).enabled
    assert [make_budget("threshold", 5).gamma_star(b) for b in (32, 33)] == [5, 0]
    assert make_budget("full", 5).gamma_star(10_000) == 5
    with pytest.raises(ValueError, match="draft budget"):
        make_budget("eager", 5)


def test_measured_rates_turn_drafts_off_where_they_lost():
    """The online fit is linear in the batch size; where the steps it chose emitted fewer tokens per second
    than plain steps at the same batch size, the budget drafts nothing there (but still explores), and
    keeps the fit's choice where drafts measured faster or one of the two arms was not measured yet."""
    from seer_sglang.speculative.budget import AdaptiveBudget, MeasuredRates

    budget = AdaptiveBudget(gamma_max=8)
    for b, n in [(1, 1), (1, 2), (1, 3), (1, 5)] * 8:  # drafts always accepted: the fit says they pay
        budget.online.record_step(b, n, COST.step_time(b, n))
    budget.online.record_acceptance([4], [4])
    fitted, fitted_small = (budget.current_model().best_gamma(b, 8) for b in (24, 2))
    assert fitted > 0 and budget.gamma_star(24) == fitted  # nothing measured yet: the fit decides
    for _ in range(MeasuredRates.MIN_STEPS):  # at batch 24 plain steps emit 24 tokens in 0.4 s, verify
        budget.rates.record(24, 0, 24, 0.4)  # steps 36 tokens in 1.1 s
        budget.rates.record(20, fitted, 36, 1.1)  # (20 and 24 share a bucket)
        budget.rates.record(2, 0, 2, 0.2)  # at batch 2 drafts win
        budget.rates.record(2, fitted_small, 4, 0.25)
    assert not budget.rates.pays(24, fitted) and budget.rates.pays(2, fitted_small) and budget.rates.pays(24, 1)
    picks = [budget.gamma_star(24) for _ in range(4 * AdaptiveBudget.EXPLORE_EVERY)]
    assert picks.count(0) >= len(picks) - 4 and any(picks)  # off, with a few exploring steps
    picks = [budget.gamma_star(2) for _ in range(AdaptiveBudget.EXPLORE_EVERY)]
    assert picks.count(fitted_small) >= len(picks) - 1
    assert budget.rates.summary(24).startswith("0: 2.50, ")  # tokens per request-second


def test_budget_records_each_step_into_the_fit_and_the_rates():
    from seer_sglang.speculative.budget import AdaptiveBudget, MeasuredRates

    budget = AdaptiveBudget(gamma_max=4)
    for _ in range(MeasuredRates.MIN_STEPS):
        budget.record_step(4, 2, [2, 2, 1, 0], [2, 0, 1, 0], 0.5)  # 4 + 3 tokens emitted
    assert budget.rates.rate(4, 2) == pytest.approx(7 / (4 * 0.5))
    assert budget.online.points[-1] == (4, pytest.approx(1 + 5 / 4), 0.5)
    assert budget.online.curve()[:2] == pytest.approx((2 / 3, 1 / 2))
    assert budget.rates.rate(4, 0) is None  # no plain step yet


def test_an_emulated_budget_takes_its_profiles_step_times_and_learns_acceptance():
    """With ``--emulate`` the adaptive budget decides by the profile's roofline (the time an emulated
    step is padded to), not by a fit of the host's step times, and learns acceptance from its steps."""
    from seer_sglang.core.step_model import load_profile
    from seer_sglang.speculative.budget import make_budget

    dense = load_profile("h100-70b")
    budget = make_budget("adaptive", 8, times=dense)
    assert budget.current_model() is None  # acceptance not seen yet: profiling lengths
    for _ in range(8):  # slow host steps do not enter: the step times are the profile's
        budget.record_step(16, 4, [4] * 16, [3] * 16, seconds=5.0)
    model = budget.current_model()
    assert model is not None and model.memory_s == dense.weight_read_s
    assert model.step_time(16, 5) == pytest.approx(dense.decode_step(16, 0, 16 * 5))
    assert model.accept_curve[:3] == (1.0, 1.0, 1.0) and model.accept_curve[3] == 0.0
    assert budget.gamma_star(16) >= 3  # accepted drafts that cost nothing at this batch are taken
    for _ in range(8):  # the host ran drafted steps slower than plain ones: no veto, the profile decides
        budget.record_step(16, 0, [0] * 16, [0] * 16, seconds=1.0)
        budget.record_step(16, 3, [3] * 16, [3] * 16, seconds=50.0)
    assert not budget.rates.pays(16, 3) and budget.gamma_star(16) >= 3
    host_fit = make_budget("adaptive", 8)
    for _ in range(8):
        host_fit.record_step(16, 4, [4] * 16, [3] * 16, seconds=5.0)
    assert host_fit.current_model() is None  # a host fit needs plain steps too


def test_the_kv_read_is_memory_time_that_drafts_verify_under():
    """On a GPU profile's roofline the batch's KV read is memory time: a batch of long contexts computes
    more draft tokens before the step stops being memory-bound, so its gamma* is larger; a budget built
    without the KV read (stored runs') sees the weights alone."""
    from seer_sglang.core.step_model import load_profile
    from seer_sglang.speculative.budget import kv_bucket

    model = load_profile("h100-70b")
    curve = CostModel.geometric_curve(0.6)
    with_kv = CostModel.from_step_model(model, curve)
    without = CostModel.from_step_model(model, curve, kv_read=False)
    assert with_kv.kv_s_per_token == model.decode_per_kv_token_s and without.kv_s_per_token == 0.0
    batch, kv = 128, 128 * 4096
    # the step is the profile's decode step less nothing: weights plus KV read against the tokens' compute
    assert with_kv.step_time(batch, 1, kv) == pytest.approx(model.decode_step(batch, kv))
    assert without.step_time(batch, 1, kv) == pytest.approx(model.decode_step(batch, 0))
    assert with_kv.best_gamma(batch, 8, kv) > without.best_gamma(batch, 8, kv)
    assert with_kv.best_gamma(batch, 8, 0) == without.best_gamma(batch, 8, 0)
    budget = DraftBudget(with_kv, 8)
    assert budget.gamma_star(batch, kv) == with_kv.best_gamma(batch, 8, kv_bucket(kv))
    assert kv_bucket(0) == 0 and kv_bucket(15) == 15 and kv_bucket(1000) == 960 and kv_bucket(1024) == 1024
    # with tree attention the budget prices a verify as the profile's step does, and drafts less at long contexts
    tree = dataclasses.replace(model, tree_attention=True)
    priced = CostModel.from_step_model(tree, curve)
    for kv_tokens in (0, kv, 128 * 8192, 128 * 40_000):
        for n in (1, 3, 9):
            assert priced.step_time(batch, n, kv_tokens) == pytest.approx(tree.decode_step(batch, kv_tokens, batch * n))
    assert priced.best_gamma(batch, 8, 128 * 8192) < with_kv.best_gamma(batch, 8, 128 * 8192)


def test_buckets_cover_every_width_up_to_the_full_tree():
    from seer_sglang.speculative.budget import bucket_width, verify_buckets, verify_width

    assert verify_buckets(9) == (1, 2, 4, 8, 9) and verify_buckets(8) == (1, 2, 4, 8) and verify_buckets(1) == (1,)
    for full in (1, 2, 5, 8, 9, 17, 64):
        buckets = verify_buckets(full)
        for needed in range(1, full + 1):
            width = bucket_width(needed, buckets)
            assert width in buckets and needed <= width  # no request gets a width its bucket cannot hold
            assert width == min(b for b in buckets if b >= needed)  # and the smallest that holds it
            assert verify_width("bucketed", needed, full) == width
            assert verify_width("ragged", needed, full) == needed and verify_width("full", needed, full) == full
        with pytest.raises(ValueError):
            bucket_width(full + 1, buckets)


def test_a_lone_long_tail_request_gets_the_full_tree_in_the_full_bucket():
    """Where drafts are cheap to verify (a GPU's decode step at a small batch is memory-bound: more
    tokens cost little), a batch of one long-tail request verifies all its drafts, at the full width."""
    from seer_sglang.speculative.budget import bucket_width, high_priority, verify_buckets

    cheap = CostModel(base_s=0.020, per_seq_s=1e-5, per_token_s=1e-6, accept_curve=CostModel.geometric_curve(0.7))
    budget = DraftBudget(cheap, gamma_max=8)
    assert budget.gamma_star(1) == 8
    (high,) = high_priority([5])
    decision = budget.allocate([BudgetRequest("tail", high, [0.7 ** (i + 1) for i in range(8)])], 1)
    assert decision.per_request == {"tail": 8}
    assert bucket_width(1 + decision.per_request["tail"], verify_buckets(9)) == 9


def test_verify_layout_by_device():
    from seer_sglang.speculative.budget import verify_layout

    assert verify_layout("auto", cpu=True) == "ragged" and verify_layout("auto", cpu=False) == "full"
    assert verify_layout("bucketed", cpu=True) == "bucketed" == verify_layout("bucketed", cpu=False)
    # LoRA takes one width for every request of a verify step: a ragged verify is bucketed there
    assert verify_layout("auto", cpu=True, lora=True) == "bucketed" == verify_layout("ragged", cpu=False, lora=True)
    assert verify_layout("auto", cpu=False, lora=True) == "full"
    with pytest.raises(ValueError):
        verify_layout("padded", cpu=True)
