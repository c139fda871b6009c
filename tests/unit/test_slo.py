"""SLO-aware decoding (core/slo.py): credit batching, VBS admission, the TTFT guard."""

from __future__ import annotations

import random

import pytest

from seer_sglang.core.slo import (SLO, CreditBatcher, Pace, Waiting, admit, best_effort_room, order_waiting,
                                  plan_step, proportionality, step_budget, step_time)
from seer_sglang.core.step_model import StepModel


def test_slos_2_4_6_decode_every_1_2_3_steps():
    batcher = CreditBatcher()
    running = {"a": 0.02, "b": 0.04, "c": 0.06}
    assert proportionality(running) == pytest.approx({"a": 1.0, "b": 0.5, "c": 1 / 3})
    steps = [set(batcher.step(running).decode) for _ in range(12)]
    assert [i for i, s in enumerate(steps) if "a" in s] == list(range(12))
    assert [i for i, s in enumerate(steps) if "b" in s] == [1, 3, 5, 7, 9, 11]
    assert [i for i, s in enumerate(steps) if "c" in s] == [2, 5, 8, 11]
    assert batcher.step(running).skipped == ["b", "c"]  # step 13: only the strictest; the others keep KV


def test_decode_frequency_converges_to_proportionality():
    rng = random.Random(7)
    running = {f"r{i}": rng.uniform(0.01, 0.2) for i in range(9)}
    trp = proportionality(running)
    batcher, counts, steps = CreditBatcher(), dict.fromkeys(running, 0), 3000
    for _ in range(steps):
        for rid in batcher.step(running).decode:
            counts[rid] += 1
    for rid in running:
        assert counts[rid] / steps == pytest.approx(trp[rid], abs=1.5 / steps)


def test_best_effort_fills_only_the_room_left_and_finished_requests_are_forgotten():
    batcher = CreditBatcher()
    running = {"slo": 0.05, "s0": None, "s1": None, "s2": None}
    batch = batcher.step(running, best_effort_room=2)
    assert batch.decode == ["slo", "s0", "s1"] and batch.skipped == ["s2"]
    assert batcher.step({"s0": None, "s1": None}).decode == ["s0", "s1"]  # no SLO request: all decode
    assert batcher.credits == {}


def test_room_for_best_effort_shrinks_as_slo_requests_arrive():
    model = StepModel(name="t", decode_base_s=0.010, decode_per_seq_s=0.001, decode_per_kv_token_s=0.0,
                      prefill_per_token_s=1e-4, capacity_tokens=100_000)
    step_s = step_time(model)
    assert best_effort_room([], 100, step_s, [100] * 64) is None
    one = best_effort_room([0.040], 100, step_s, [100] * 64, 1.0)
    two = best_effort_room([0.040, 0.040], 100, step_s, [100] * 64, 1.0)
    assert one == 29 and two == 28  # 0.010 + 0.001 * 30 = 0.040: the strictest SLO still holds
    assert best_effort_room([0.040], 100, step_s, [100] * 10, 1.0) == 10
    assert best_effort_room([0.005], 100, step_s, [100] * 64) == 0


def test_long_rollout_samples_take_more_room_than_short_ones():
    """A step reads every sequence's KV: room counts the best-effort rows' own contexts, in order."""
    model = StepModel(name="t", decode_base_s=0.010, decode_per_seq_s=0.0, decode_per_kv_token_s=1e-6,
                      prefill_per_token_s=1e-4, capacity_tokens=1_000_000)
    step_s = step_time(model)  # 10 ms + 1 us per KV token read
    assert best_effort_room([0.040], 1000, step_s, [1000] * 64, 1.0) == 29  # 10 + 30 x 1 ms
    assert best_effort_room([0.040], 1000, step_s, [10_000] * 64, 1.0) == 2  # 10 + 1 + 2 x 10 ms
    assert best_effort_room([0.040], 1000, step_s, [1000, 1000, 30_000, 1000], 1.0) == 2  # in order


def test_step_budget_follows_each_requests_pace():
    tpots = {"strict": 0.040, "loose": 0.080}
    assert step_budget(tpots, {}, now_s=10.0, headroom=0.9) == pytest.approx(0.036)  # no pace yet: 90% of 40 ms
    # 10 tokens in 0.30 s, against 0.36 s at 90% of 40 ms: the 60 ms it banked may go to a larger step,
    # never planned over the tightest SLO itself
    ahead = {"strict": Pace(0.040, 9.7, 10), "loose": Pace(0.080, 9.5, 10)}
    assert step_budget(tpots, ahead, now_s=10.0, headroom=0.9) == pytest.approx(0.040)
    behind = {"strict": Pace(0.040, 9.6, 10), "loose": Pace(0.080, 9.5, 10)}  # 4 ms behind: a 32 ms step
    assert step_budget(tpots, behind, now_s=10.0, headroom=0.9) == pytest.approx(9.6 + 11 * 0.036 - 10.0)
    # the loose request (TRP 1/2) decodes every second step: half of its allowance per step
    late_loose = {"strict": Pace(0.040, 9.7, 10), "loose": Pace(0.080, 9.0, 13)}
    assert step_budget(tpots, late_loose, now_s=10.0, headroom=0.9) == pytest.approx(0.5 * (9.0 + 14 * 0.072 - 10.0))
    # a request without a pace yet (just admitted) holds the step to 90% of the tightest SLO
    assert step_budget(tpots, {"strict": Pace(0.040, 9.7, 10)}, now_s=10.0, headroom=0.9) == pytest.approx(0.036)


def _mean_tpot(paced: bool) -> tuple[float, int]:
    """A strict request (40 ms TPOT SLO) beside 64 rollout rows for 200 tokens, on an instance whose
    real steps take 25% longer than its model says and that runs a 15 ms prefill every 8 steps."""
    model = StepModel(name="t", decode_base_s=0.010, decode_per_seq_s=0.001, decode_per_kv_token_s=0.0,
                      prefill_per_token_s=1e-4, capacity_tokens=100_000)
    step_s = step_time(model)
    running = {"strict": 0.040, **{f"s{i}": None for i in range(64)}}
    kv = dict.fromkeys(running, 100)
    batcher, now, rows = CreditBatcher(), 0.0, 0
    for n in range(200):
        paces = {"strict": Pace(0.040, 0.0, n)} if paced else None
        batch = plan_step(batcher, running, kv, step_s, 0.9, paces, now)
        rows += len(batch.decode) - 1
        now += 1.25 * step_s(len(batch.decode), 100)
        if n % 8 == 7:
            now += 0.015
    return now / 200, rows


def test_paced_steps_keep_the_mean_tpot_where_a_fixed_share_of_the_slo_does_not():
    fixed_tpot, fixed_rows = _mean_tpot(paced=False)
    paced_tpot, paced_rows = _mean_tpot(paced=True)
    assert fixed_tpot > 0.040  # each step planned at 36 ms: the slow steps and the prefills break the SLO
    assert 0.9 * 0.036 < paced_tpot <= 0.036 + 0.002  # the pace pays them back from measured time
    assert paced_rows > 0.5 * fixed_rows  # and the rollout rows still fill what is left


def test_admission_holds_the_tightest_tpot_slo():
    model = StepModel(name="t", decode_base_s=0.010, decode_per_seq_s=0.001, decode_per_kv_token_s=1e-6,
                      prefill_per_token_s=1e-4, capacity_tokens=100_000)
    step_s = step_time(model)
    ok = admit([0.02, 0.04], [1000, 1000], 0.04, 1000, step_s, 1.0)
    assert ok.admitted and ok.virtual_batch == pytest.approx(2.0)
    assert ok.estimated_tpot_s == pytest.approx(0.010 + 0.002 + 2000e-6) and ok.bound_s == 0.02
    # Loose newcomers cost a fraction of a sequence each; a strict one makes everyone a full sequence.
    crowd = [0.5] * 200
    assert admit(crowd, [1000] * 200, 0.5, 1000, step_s, 1.0).admitted
    tight = admit(crowd, [1000] * 200, 0.012, 1000, step_s, 1.0)
    assert not tight.admitted and "over the tightest TPOT SLO of 12.0 ms" in tight.reason


def test_waiting_requests_go_least_slack_first_and_hopeless_ones_are_rejected():
    waiting = [Waiting("loose", 0.0, 2.0, 0.1), Waiting("rollout", 0.0, None, 0.5),
               Waiting("tight", 0.5, 0.8, 0.1), Waiting("late", 0.0, 0.9, 0.2), Waiting("rollout2", -1.0, None, 0.1)]
    out = order_waiting(waiting, now_s=1.0)
    assert out.order == ["tight", "loose", "rollout2", "rollout"]
    assert list(out.rejected) == ["late"] and "900 ms cannot be met" in out.rejected["late"]


def test_slo_values_must_be_positive():
    assert SLO(tpot_s=0.05).ttft_s is None
    with pytest.raises(ValueError):
        SLO(ttft_s=0)


def _sample(rid: str, tpot_ms: float | None, prompt: int = 100):
    from seer_sglang.core.request import Sample, SamplingParams

    slo = SLO(tpot_s=tpot_ms / 1e3) if tpot_ms is not None else None
    return Sample(rid=rid, group_id=rid, index=0, prompt_ids=[1] * prompt,
                  params=SamplingParams(max_new_tokens=32, slo=slo))


def test_slo_samples_go_where_admission_holds_and_are_refused_where_it_holds_nowhere():
    from seer_sglang.core.policy import InstanceView, route_slo

    fast = step_time(StepModel(name="f", decode_base_s=0.010, decode_per_seq_s=0.001, decode_per_kv_token_s=0.0,
                               prefill_per_token_s=1e-4, capacity_tokens=100_000))
    slow = step_time(StepModel(name="s", decode_base_s=0.030, decode_per_seq_s=0.001, decode_per_kv_token_s=0.0,
                               prefill_per_token_s=1e-4, capacity_tokens=100_000))
    views = [InstanceView(0, step_s=slow), InstanceView(1, step_s=fast)]
    target, verdict = route_slo(views, _sample("a", 20), 1.0)
    assert target.index == 1 and verdict.admitted  # 30 ms steps miss a 20 ms SLO; 11 ms ones do not
    target.claim(_sample("a", 20), 32)
    assert views[1].slo_requests == {"a": (0.020, 100)}
    # the fast instance now runs one 20 ms request; a second one fits (12 ms), a 5 ms one fits nowhere
    assert route_slo(views, _sample("b", 20), 1.0)[0].index == 1
    none, why = route_slo(views, _sample("c", 5), 1.0)
    assert none is None and not why.admitted and "over the tightest TPOT SLO of 5.0 ms" in why.reason
    views[1].release(_sample("a", 20), 32)
    assert views[1].slo_requests == {}
    # without a fit yet an instance admits (its own admission decides); best-effort samples never go here
    assert route_slo([InstanceView(0)], _sample("d", 5))[0].index == 0
    assert route_slo([InstanceView(0, healthy=False)], _sample("e", 5)) == (None, None)


def test_attainment_measures_ttft_from_submission_and_tpot_between_later_tokens():
    from seer_sglang.core.slo import attainment, slo_class

    slo = SLO(ttft_s=0.5, tpot_s=0.05)
    ok = attainment(slo, 10.0, 10.4, 10.4 + 0.04 * 9, 10)
    assert ok.ttft_s == pytest.approx(0.4) and ok.tpot_s == pytest.approx(0.04) and ok.met
    late = attainment(slo, 10.0, 10.6, 10.6 + 0.04 * 9, 10)
    assert late.ttft_met is False and late.tpot_met and not late.met
    slow = attainment(SLO(tpot_s=0.05), 10.0, 10.1, 10.1 + 0.06 * 9, 10)
    assert slow.ttft_met is None and slow.tpot_met is False
    assert slo_class(slo) == "tpot_le_50ms" and slo_class(SLO(ttft_s=1.0)) == "ttft_le_1000ms"
    # client-chosen values fall into a fixed set of classes: the metric's labels stay bounded
    classes = {slo_class(SLO(tpot_s=ms / 1e3)) for ms in range(1, 100_000, 7)}
    assert len(classes) <= 13 and slo_class(SLO(tpot_s=0.0491)) == "tpot_le_50ms"
    assert slo_class(SLO(ttft_s=3600.0)) == "ttft_over_60000ms"


def test_plugin_puts_slo_requests_first_by_deadline_and_refuses_the_hopeless():
    import time
    from types import SimpleNamespace as NS

    from seer_sglang.plugin import slo_batching
    from seer_sglang.wire import SLO_PARAM, slo_param

    def req(rid, tpot=None, ttft=None, deadline=None, prompt=10):
        custom = {SLO_PARAM: slo_param(tpot, ttft, deadline)} if (tpot or ttft) else None
        return NS(rid=rid, sampling_params=NS(custom_params=custom), origin_input_ids=[0] * prompt,
                  output_ids=[], finished=lambda: False)

    now = time.time()
    queue = [req("rollout-0"), req("late", ttft=1.0, deadline=now + 0.9), req("soon", ttft=1.0, deadline=now + 0.2),
             req("rollout-1"), req("tpot-only", tpot=0.05)]
    assert [r.rid for r in slo_batching.deadline_first(queue)] == ["soon", "late", "tpot-only", "rollout-0", "rollout-1"]
    assert slo_batching.deadline_first([req("rollout-0")]) is None

    model = StepModel(name="t", decode_base_s=0.010, decode_per_seq_s=0.001, decode_per_kv_token_s=0.0,
                      prefill_per_token_s=1e-3, capacity_tokens=100_000)
    state = slo_batching._State(1.0, model)
    gone = req("gone", ttft=0.5, deadline=now - 0.1)  # its TTFT deadline has passed
    big = req("big", ttft=0.5, deadline=now + 0.3, prompt=1000)  # needs a 1 s prefill
    strict = req("strict", tpot=0.005)  # a step takes at least 10 ms
    fine = req("fine", tpot=0.05, ttft=0.5, deadline=now + 0.4)
    refused = slo_batching._refusals(state, [gone, big, strict, fine], NS(reqs=[]))
    assert {id(gone), id(big), id(strict)} == set(refused) and id(fine) not in refused
    assert refused[id(gone)][1] == refused[id(big)][1] == "ttft" and refused[id(strict)][1] == "tpot"


def test_a_best_effort_prefill_waits_until_every_slo_request_has_banked_its_time():
    from seer_sglang.core.slo import Pace, prefill_fits

    ahead = Pace(tpot_s=0.020, since_s=0.0, tokens=10)  # 10 tokens in 150 ms: 50 ms banked at t=0.15
    assert ahead.slack_s(0.15) == pytest.approx(0.05)
    assert prefill_fits([ahead], 0.15, 0.04) and not prefill_fits([ahead], 0.15, 0.06)
    behind = Pace(tpot_s=0.020, since_s=0.0, tokens=5)  # 5 tokens in 150 ms: 50 ms late
    assert not prefill_fits([ahead, behind], 0.15, 0.0)
    assert prefill_fits([], 0.15, 10.0)
