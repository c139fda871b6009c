"""The rollout benchmark's baselines and bounds (``benchmarks.harness.baselines``): ratios against the
strongest plain SGLang of the run, the others kept beside; the critical-path bound; the regime; and the
instances' retraction counters read off Prometheus text (``benchmarks.harness.sglang_router``)."""

import pytest

from benchmarks.harness.baselines import (bound, canonical, critical_path_s, is_plain, ratio_keys, reference,
                                          reference_of, regime)
from benchmarks.harness.sglang_router import RETRACTIONS, counter_value, retraction_delta, router_command
from benchmarks.harness.targets import check
from seer_sglang.core.step_model import StepModel


def mode(completions: list[float], tokens: int = 1000, tail: float = 1.0, longest: int = 100, **extra) -> dict:
    reps = [{"completion_s": c, "output_tokens": tokens, "longest_tokens": longest} for c in completions]
    return {"repeats": reps, "completion_s": sum(completions) / len(completions), "tail_s": tail, **extra}


def test_the_reference_is_the_fastest_plain_mode_and_the_ratios_are_against_it():
    results = {"plain-group": mode([10.0, 12.0], tail=4.0), "plain-router": mode([8.0, 9.0], tail=2.0),
               "plain-router-p2": mode([9.0, 9.0], tail=3.0), "context": mode([4.0, 4.5], tail=0.5)}
    assert reference(results) == "plain-router"
    keys = ratio_keys(results)
    assert keys["reference"] == "plain-router"
    # throughput: total tokens over total time, against the reference's
    assert keys["ratios"]["context"]["throughput"] == pytest.approx((2000 / 8.5) / (2000 / 17.0))
    assert keys["ratios"]["context"]["tail"] == pytest.approx(0.5 / 2.0)
    assert keys["ratios"]["plain-router"]["throughput"] == pytest.approx(1.0)
    assert set(keys["ratios_by_baseline"]) == {"plain-group", "plain-router", "plain-router-p2"}
    assert keys["ratios_by_baseline"]["plain-group"]["context"]["throughput"] == pytest.approx((2000 / 8.5) / (2000 / 22.0))
    assert keys["ratios_by_baseline"]["plain-router"] == keys["ratios"]


def test_throughput_pools_repeats_so_a_mode_with_more_tokens_per_second_wins_even_with_a_longer_mean():
    # 2000 tokens in 20 s (100 tok/s) beats 1000 tokens in 12 s although its completion is longer
    results = {"plain-group": mode([20.0], tokens=2000), "plain-router": mode([12.0], tokens=1000)}
    assert reference(results) == "plain-group"


def test_a_run_without_a_plain_mode_keeps_its_first_mode_as_the_reference():
    results = {"divided": mode([5.0]), "context": mode([4.0])}
    keys = ratio_keys(results)
    assert keys["reference"] == "divided" and keys["ratios_by_baseline"] == {}
    assert keys["ratios"]["context"]["throughput"] == pytest.approx(1.25)


def test_baseline_is_the_stored_name_of_plain_group():
    assert canonical("baseline") == "plain-group" and canonical("context") == "context"
    assert is_plain("baseline") and is_plain("plain-router-p2") and not is_plain("context+sd")
    assert reference_of({"modes": {"baseline": {}, "context": {}}}) == "baseline"  # a run before references
    assert reference_of({"modes": {"context": {}, "divided": {}}}) == "context"
    assert reference_of({"reference": "plain-router", "modes": {"plain-group": {}, "plain-router": {}}}) == "plain-router"


def test_targets_hold_seer_modes_to_the_runs_reference():
    results = {"plain-group": mode([100.0], tail=10.0, retractions=0, idle_share=[0.1]),
               "plain-router": mode([80.0], tail=8.0, retractions=4, idle_share=[0.1]),
               "context": mode([50.0], tail=2.0, retractions=0, idle_share=[0.1])}
    run = {"config": {}, "modes": results, **ratio_keys(results)}
    rows = check(run)
    retract = next(r for r in rows if r["kind"] == "retractions")
    assert retract["mode"] == "plain-router" and retract["measured"] == 4
    context = next(r for r in rows if r["kind"] == "throughput" and r["mode"] == "context")
    assert context["measured"] == pytest.approx(80.0 / 50.0)  # against plain-router, not plain-group's 2.0
    assert context["target"] == "throughput >= 1.2x the strongest plain SGLang's"


def test_the_critical_path_is_the_longest_sample_at_the_smallest_step():
    assert critical_path_s(1000, 0.02) == pytest.approx(20.0)
    assert critical_path_s(1000, 0.02, tokens_per_step=2.5) == pytest.approx(8.0)
    assert critical_path_s(1000, 0.02, tokens_per_step=0.5) == pytest.approx(20.0)  # never below one a step
    results = {"plain-group": mode([40.0], longest=900), "context+sd": mode([16.0], longest=1000,
                                                                            mean_acceptance_length=2.0)}
    b = bound(results, 0.01, "plain-group", "test")
    assert b["longest_tokens"] == 1000 and b["critical_path_s"] == pytest.approx(10.0)
    assert b["share"] == pytest.approx(10.0 / 40.0) and b["share_of"] == "plain-group"
    assert b["by_mode"]["context+sd"]["critical_path_s"] == pytest.approx(5.0)
    assert b["by_mode"]["context+sd"]["share"] == pytest.approx(5.0 / 16.0)


def test_the_regime_says_when_a_full_step_costs_under_twice_a_lone_one():
    # fixed cost dominates: a full batch barely costs more than one request
    flat = StepModel(name="flat", decode_base_s=0.010, decode_per_seq_s=0.0001, decode_per_kv_token_s=0.0,
                     prefill_per_token_s=0.0, capacity_tokens=100_000)
    g = regime(flat, samples=64, instances=2, prompt_tokens=100, mean_output=400, longest_output=2000)
    assert g["requests_per_step"] == 32
    assert g["full_over_idle"] == pytest.approx((0.010 + 0.0032) / 0.0101)
    assert g["fixed_share"] == pytest.approx(1.0)
    assert "note" in g
    # KV reads grow with the batch: a full step is many lone steps
    steep = StepModel(name="steep", decode_base_s=0.0005, decode_per_seq_s=0.0, decode_per_kv_token_s=1e-6,
                      prefill_per_token_s=0.0, capacity_tokens=50_000)
    g = regime(steep, samples=64, instances=2, prompt_tokens=100, mean_output=400, longest_output=2000)
    assert g["full_over_idle"] == pytest.approx((0.0005 + 32 * 300e-6) / (0.0005 + 2100e-6))
    assert g["full_over_idle"] > 2 and "note" not in g
    # a small KV holds fewer samples at their full length than the instance is given
    small = StepModel(name="small", decode_base_s=0.010, decode_per_seq_s=0.0, decode_per_kv_token_s=0.0,
                      prefill_per_token_s=0.0, capacity_tokens=5_000)
    assert regime(small, 64, 2, 100, 400, 2000)["requests_per_step"] == 10


def test_retractions_come_from_the_instances_prometheus_counter():
    text = "\n".join([f"# HELP {RETRACTIONS} Total number of retracted requests.",
                      f"# TYPE {RETRACTIONS} counter",
                      f'{RETRACTIONS}{{model_name="tiny",engine_type="unified"}} 3.0',
                      f'{RETRACTIONS}{{model_name="tiny",engine_type="other"}} 2.0',
                      'sglang:num_retracted_requests_total_created{model_name="tiny"} 1.7e9',
                      'sglang:num_retracted_reqs{model_name="tiny"} 1.0'])
    assert counter_value(text, RETRACTIONS) == 5.0
    assert counter_value("sglang:other 1\n", RETRACTIONS) is None
    before = [{"requests": 1.0, "input_tokens": 300.0, "output_tokens": 40.0},
              {"requests": 0.0, "input_tokens": 0.0, "output_tokens": 0.0}]
    after = [{"requests": 4.0, "input_tokens": 1200.0, "output_tokens": 100.0},
             {"requests": 2.0, "input_tokens": 500.0, "output_tokens": 30.0}]
    assert retraction_delta(before, after) == {"total": 5.0, "per_instance": [3.0, 2.0], "input_tokens": 1400.0,
                                               "output_tokens": 90.0, "recomputed_tokens": 1490.0}
    gap = retraction_delta([before[0], None], [after[0], None])  # an instance without metrics
    assert gap["total"] is None and gap["recomputed_tokens"] is None and gap["per_instance"] == [3.0, None]


def test_the_router_runs_on_localhost_with_the_policy_and_without_retries():
    cmd = router_command(["http://127.0.0.1:1", "http://127.0.0.1:2"], "power_of_two", 30001, 30002)
    assert cmd[1:3] == ["-m", "sglang_router.launch_router"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "30001"
    assert cmd[cmd.index("--policy") + 1] == "power_of_two"
    assert cmd[cmd.index("--worker-urls") + 1:cmd.index("--worker-urls") + 3] == ["http://127.0.0.1:1",
                                                                                  "http://127.0.0.1:2"]
    assert "--disable-retries" in cmd


def test_plain_sample_sends_every_sample_to_the_next_instance_and_plain_group_keeps_groups_whole():
    """``plain-sample`` is a plain mode (a reference candidate) whose client spreads a group's siblings
    over the instances in turn, as a least-requests balancer places a burst; the simulator places it so."""
    from benchmarks.harness.simulate import SIM_PLACEMENT
    from benchmarks.rollout import plain_instance
    from seer_sglang.sim.workload import TraceSample

    trace = [TraceSample(g, i, 10, 5) for g in range(3) for i in range(4)]
    per_sample = [plain_instance(k, s, 4, True) for k, s in enumerate(trace)]
    whole = [plain_instance(k, s, 4, False) for k, s in enumerate(trace)]
    assert per_sample == [0, 1, 2, 3] * 3
    assert whole == [0] * 4 + [1] * 4 + [2] * 4
    assert is_plain("plain-sample") and SIM_PLACEMENT["plain-sample"] == "sample-round-robin"
    assert reference({"plain-sample": mode([9.0, 9.0], tail=2.0), "plain-router-p2": mode([9.5, 9.5], tail=2.0),
                      "context": mode([8.0, 8.0], tail=1.0)}) == "plain-sample"
