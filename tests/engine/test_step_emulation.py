"""The emulated instances price the batches SGLang really schedules with the step-time model (the
pure model itself is tested in tests/unit/test_step_model.py)."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from seer_sglang.core.step_model import Admission, StepModel

ROOF = StepModel(name="roof", decode_base_s=0.005, decode_per_seq_s=2e-5, decode_per_kv_token_s=1e-8,
                 prefill_per_token_s=3e-5, capacity_tokens=1_000_000, weight_read_s=0.006,
                 compute_per_token_s=3e-5, attention_per_pair_s=5e-10)


def _batch(mode: str, seq_lens: list[int], extend=None, prefix=None, input_tokens=None):
    forward = SimpleNamespace(is_extend=lambda: mode in ("extend", "verify"), is_target_verify=lambda: mode == "verify",
                              is_idle=lambda: False)
    return SimpleNamespace(forward_mode=forward, reqs=[None] * len(seq_lens), seq_lens_cpu=torch.tensor(seq_lens),
                           seq_lens_sum=sum(seq_lens), extend_lens=extend, prefix_lens=prefix,
                           input_ids=None if input_tokens is None else torch.zeros(input_tokens))


def test_emulated_steps_are_priced_from_the_batch_sglang_ran():
    from seer_sglang.plugin.emulation import batch_step_s

    assert batch_step_s(ROOF, _batch("decode", [100, 300])) == pytest.approx(ROOF.decode_step(2, 400))
    assert batch_step_s(ROOF, _batch("verify", [100, 300], input_tokens=16)) == pytest.approx(
        ROOF.decode_step(2, 400, tokens=16))
    assert batch_step_s(ROOF, _batch("extend", [120, 40], extend=[20, 40], prefix=[100, 0])) == pytest.approx(
        ROOF.prefill_batch([20, 40], [100, 0]))
    # a profile with the lone sequence's read: the batch's longest sequence sets it
    lone = dataclasses.replace(ROOF, decode_lone_kv_token_s=1e-6)
    assert batch_step_s(lone, _batch("decode", [100, 3000])) == pytest.approx(lone.decode_step(2, 3100, longest=3000))
    assert batch_step_s(lone, _batch("decode", [100, 3000])) > batch_step_s(ROOF, _batch("decode", [100, 3000])) + 2e-3


def test_padded_forward_waits_for_the_model_and_counts_overruns(monkeypatch):
    import time

    from seer_sglang.plugin import emulation

    monkeypatch.setattr(emulation, "_model", dataclasses.replace(ROOF, decode_base_s=0.05, weight_read_s=0.0))
    monkeypatch.setattr(emulation, "_tolerance_s", 0.02)
    emulation.reset()
    emulation.went_idle()
    start = time.perf_counter()
    emulation.padded_forward(lambda worker, batch: "out", None, _batch("decode", [10]))
    assert time.perf_counter() - start >= 0.05 and emulation.STATS["overruns"] == 0
    emulation.padded_forward(lambda worker, batch: time.sleep(0.09), None, _batch("decode", [10]))
    assert emulation.STATS["steps"] == 2 and emulation.STATS["overruns"] == 1  # 40 ms behind > 20 ms
    state = {}
    emulation.report(None, None, state)
    assert state["seer_emulation"]["overrun_share"] == 0.5
    emulation.reset()
    emulation.went_idle()


def test_the_clock_counts_work_between_steps_and_catches_up_after_a_late_step(monkeypatch):
    """The emulated clock runs from the end of the previous step, as on a GPU where the scheduler's
    work hides under the kernels: work between steps counts, a step that ran past its end is caught
    up by the next ones, and only falling behind by more than the tolerance is an overrun. After
    SGLang's idle housekeeping the clock restarts."""
    import time

    from seer_sglang.plugin import emulation

    monkeypatch.setattr(emulation, "_model", dataclasses.replace(ROOF, decode_base_s=0.05, weight_read_s=0.0))
    monkeypatch.setattr(emulation, "_tolerance_s", 0.05)
    emulation.reset()
    emulation.went_idle()
    t0 = time.perf_counter()
    emulation.padded_forward(lambda worker, batch: None, None, _batch("decode", [10]))
    time.sleep(0.03)  # the scheduler's own work: inside the next step's 50 ms
    emulation.padded_forward(lambda worker, batch: None, None, _batch("decode", [10]))
    assert 0.095 <= time.perf_counter() - t0 < 0.13 and emulation.STATS["overruns"] == 0
    emulation.padded_forward(lambda worker, batch: time.sleep(0.08), None, _batch("decode", [10]))  # 30 ms late
    emulation.padded_forward(lambda worker, batch: None, None, _batch("decode", [10]))  # waits 20 ms: caught up
    assert 0.195 <= time.perf_counter() - t0 < 0.23 and emulation.STATS["overruns"] == 0
    emulation.went_idle()
    time.sleep(0.06)  # idle time is not the scheduler's work
    start = time.perf_counter()
    emulation.padded_forward(lambda worker, batch: None, None, _batch("decode", [10]))
    assert time.perf_counter() - start >= 0.05 and emulation.STATS["overruns"] == 0
    # every late step was caught up before the idle spell: uncaught, the 30 ms late step would be
    # lost whole; what is left is the host's sleep overshoot, a few ms on a loaded machine
    assert emulation.STATS["lost_s"] < 0.02
    emulation.reset()
    emulation.went_idle()


def test_the_emulation_reports_host_time_against_model_time_by_kind_of_step(monkeypatch):
    """A run that falls behind must say which steps the host could not hold: per kind of step, the
    model's time and the host's (the forward and the scheduler's work since the previous step)."""
    import time

    from seer_sglang.plugin import emulation

    monkeypatch.setattr(emulation, "_model", dataclasses.replace(ROOF, decode_base_s=0.02, weight_read_s=0.0))
    monkeypatch.setattr(emulation, "_tolerance_s", 1.0)
    emulation.reset()
    emulation.went_idle()
    emulation.padded_forward(lambda worker, batch: None, None, _batch("decode", [10]))
    time.sleep(0.05)  # the scheduler's work before the verify step: the host's, past the model's 20 ms
    emulation.padded_forward(lambda worker, batch: time.sleep(0.01), None, _batch("verify", [10], input_tokens=4))
    kinds = emulation.STATS["kinds"]
    assert set(kinds) == {"decode", "verify"} and kinds["verify"]["steps"] == 1
    assert kinds["decode"]["host_s"] < 0.015 <= kinds["decode"]["model_s"]  # padded, not host work
    assert 0.06 <= kinds["verify"]["host_s"] < 0.09 and kinds["verify"]["model_s"] < 0.03
    state = {}
    emulation.report(None, None, state)
    assert state["seer_emulation"]["kinds"]["verify"]["steps"] == 1
    emulation.reset()
    emulation.went_idle()
    assert emulation.STATS["kinds"] == {}


def test_admission_scales_with_the_lengths_and_sets_sglangs_own_variables():
    from pathlib import Path

    import sglang.srt.managers.schedule_policy as schedule_policy
    from sglang.srt.environ import envs

    full, short = Admission(), Admission().scaled(0.01)
    assert (short.decay_steps, short.retract_steps, short.clip_max_new) == (6, 1, 41)
    assert short.init_ratio == full.init_ratio and short.min_ratio == pytest.approx(0.7 * 0.14)
    assert full.decay == pytest.approx((0.7 - 0.098) / 600)
    env = short.sglang_env()
    for name in env:  # SGLang's names: its env registry, or read directly by its admission policy
        assert hasattr(envs, name) or name in Path(schedule_policy.__file__).read_text()
    assert env["SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS"] == "6"
