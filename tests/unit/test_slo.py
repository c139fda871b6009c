"""SLO-aware decoding (core/slo.py): credit batching, VBS admission, the TTFT guard."""

from __future__ import annotations

import random

import pytest

from seer_sglang.core.slo import (SLO, CreditBatcher, Waiting, admit, best_effort_room, order_waiting,
                                  proportionality, step_time)
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
    assert best_effort_room([], 100, step_s, 64) is None
    one = best_effort_room([0.040], 100, step_s, 64)
    two = best_effort_room([0.040, 0.040], 100, step_s, 64)
    assert one == 29 and two == 28  # 0.010 + 0.001 * 30 = 0.040: the strictest SLO still holds
    assert best_effort_room([0.040], 100, step_s, 10) == 10
    assert best_effort_room([0.005], 100, step_s, 64) == 0


def test_admission_holds_the_tightest_tpot_slo():
    model = StepModel(name="t", decode_base_s=0.010, decode_per_seq_s=0.001, decode_per_kv_token_s=1e-6,
                      prefill_per_token_s=1e-4, capacity_tokens=100_000)
    step_s = step_time(model)
    ok = admit([0.02, 0.04], [1000, 1000], 0.04, 1000, step_s)
    assert ok.admitted and ok.virtual_batch == pytest.approx(2.0)
    assert ok.estimated_tpot_s == pytest.approx(0.010 + 0.002 + 2000e-6) and ok.bound_s == 0.02
    # Loose newcomers cost a fraction of a sequence each; a strict one makes everyone a full sequence.
    crowd = [0.5] * 200
    assert admit(crowd, [1000] * 200, 0.5, 1000, step_s).admitted
    tight = admit(crowd, [1000] * 200, 0.012, 1000, step_s)
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
