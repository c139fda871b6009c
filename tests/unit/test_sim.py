"""The simulator drives the real policy objects over a modelled cluster."""

import dataclasses
import math

import pytest

from seer_sglang.config import SLO_CONFIG
from seer_sglang.core.policy import POLICIES, make_policy
from seer_sglang.sim.simulator import simulate
from seer_sglang.core.step_model import StepModel
from seer_sglang.sim.workload import PRESETS, generate, kv_cap, load_trace, save_trace, sim_group_id, trace_group

SLO_HEADROOM = SLO_CONFIG.headroom
SMALL = StepModel(name="test", decode_base_s=0.01, decode_per_seq_s=1e-4, decode_per_kv_token_s=1e-7,
                  prefill_per_token_s=2e-5, capacity_tokens=20_000, max_running=256)


@pytest.fixture(scope="module")
def trace():
    return generate(PRESETS["moonlight"].scaled(4096, (50, 200)), prompts=24, seed=1)


def test_workload_shape_and_trace_roundtrip(tmp_path, trace):
    lengths = [s.output_len for s in trace]
    assert len(trace) == 24 * 8 and max(lengths) <= 4096
    mean = sum(lengths) / len(lengths)
    assert 0.2 * 4096 < mean < 0.5 * 4096  # moonlight's mean/max is 0.34
    by_group = {}
    for s in trace:
        by_group.setdefault(s.group_id, []).append(s.output_len)
    spread_within = sum(max(v) / max(1, min(v)) for v in by_group.values()) / len(by_group)
    means = sorted(sum(v) / len(v) for v in by_group.values())
    assert means[-1] / means[0] > 5 and spread_within < 5  # long tail across, alike within groups
    save_trace(trace, tmp_path / "t.jsonl")
    assert load_trace(tmp_path / "t.jsonl") == trace


def test_a_simulated_group_id_names_its_trace_group_and_nothing_else():
    assert [trace_group(sim_group_id(g)) for g in (0, 7, 31)] == [0, 7, 31]
    for name in ("b3-0", "g", "g-1", "7", "g3x"):
        with pytest.raises(ValueError):
            trace_group(name)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_finishes_every_sample_exactly(trace, name):
    result = simulate(trace, make_policy(name, chunk_size=512), SMALL, instances=4, max_tokens=4096)
    assert result.total_tokens == sum(s.output_len for s in trace)
    assert len(result.finish_times) == len(trace)
    assert 0 < result.efficiency <= 1.0 and result.tail_s <= result.completion_s


def test_divided_rollout_within_the_kv_never_retracts_and_shortens_the_tail(trace):
    """Chunks whose worst cases stay within the KV (a 0.95 headroom) never make SGLang retract; the default
    headroom commits past the KV, retracts now and then, and finishes sooner. Whole groups retract too
    (how often depends on the admission latch, which the next test holds), and end with a longer tail."""
    group = simulate(trace, make_policy("group"), SMALL, instances=4, max_tokens=4096)
    context = simulate(trace, make_policy("context", chunk_size=512), SMALL, instances=4, max_tokens=4096)
    within = simulate(trace, make_policy("context", chunk_size=512, kv_headroom=0.95), SMALL, instances=4,
                      max_tokens=4096)
    assert within.retractions == 0 < context.retractions and group.retractions > 0
    assert context.tail_s < group.tail_s and context.completion_s < within.completion_s
    oracle = simulate(trace, make_policy("oracle", chunk_size=512), SMALL, instances=4, max_tokens=4096)
    assert oracle.completion_s <= group.completion_s


@pytest.mark.parametrize("name", ["divided", "context", "oracle", "group"])
def test_the_policy_is_asked_again_only_after_what_it_reads_changed(trace, name):
    """The simulator skips asking the policy while the buffer, the views and the policy's own state are
    as they were when it last placed nothing; asking it at every step end instead gives the same run."""
    from seer_sglang.sim.simulator import Simulation
    from seer_sglang.sim.spec_model import SpecModel

    class AlwaysAsks(Simulation):
        def dispatch(self) -> None:
            self.changed = True
            super().dispatch()

    asked = []

    class Counting(Simulation):
        def dispatch(self) -> None:
            asked.append(self.changed)
            super().dispatch()

    tight = dataclasses.replace(SMALL, capacity_tokens=6_000)
    for spec in (None, SpecModel()):
        runs = [cls(trace, make_policy(name, chunk_size=256), tight, 4, 4096, spec=spec).run()
                for cls in (AlwaysAsks, Counting)]
        assert runs[0] == runs[1]
    assert asked.count(False) > asked.count(True)  # most step ends change nothing the policy reads


def test_step_model_closed_form_matches_stepwise_sum():
    m = dataclasses.replace(SMALL, decode_per_kv_token_s=3e-7)
    stepwise = sum(m.decode_step(16, 1000 + 16 * i) for i in range(20))
    assert abs(m.decode_steps(20, 16, 1000) - stepwise) < 1e-9


def test_speculation_runs_the_engines_draft_budget(trace):
    """+sd modes: every sample still ends exactly; drafts that are never accepted change nothing; better
    acceptance makes the rollout faster; sibling drafts (group) beat a request's own (suffix); and the
    budget turns drafts off where verifying a token costs more than it can save."""
    from seer_sglang.sim.__main__ import mode_features
    from seer_sglang.sim.spec_model import SpecModel

    policy = lambda: make_policy("context", chunk_size=512)  # noqa: E731
    # SGLang runs speculation on CPU without its overlap scheduler: the plain run is held to the same
    plain = simulate(trace, policy(), SMALL, instances=4, max_tokens=4096, overlap=False)
    useless = simulate(trace, policy(), SMALL, 4, 4096, spec=SpecModel(own_alpha=0.0, group_alpha=0.0))
    assert useless.completion_s == pytest.approx(plain.completion_s) and useless.mean_acceptance_length == 1.0
    grouped = simulate(trace, policy(), SMALL, 4, 4096, spec=SpecModel())
    suffix = simulate(trace, policy(), SMALL, 4, 4096, spec=SpecModel(grouped=False))
    for r in (grouped, suffix):
        assert r.total_tokens == plain.total_tokens and len(r.finish_times) == len(trace)
    assert grouped.mean_acceptance_length > suffix.mean_acceptance_length > 1.2
    assert grouped.completion_s < suffix.completion_s < plain.completion_s
    costly = simulate(trace, policy(), SMALL, 4, 4096, spec=SpecModel(verify_per_token_s=1.0))
    assert costly.mean_acceptance_length == 1.0 and costly.completion_s == pytest.approx(plain.completion_s)
    assert mode_features("context+pool+sd-suffix")[1:] == (True, SpecModel(grouped=False))
    with pytest.raises(ValueError, match="sd-eagle"):
        mode_features("context+sd-eagle")


def test_measured_acceptance_replaces_the_assumed_one(tmp_path):
    """A draft-replay result (tokens per verify step by finished siblings) becomes acceptance odds that
    give those lengths back, interpolated by the share of siblings finished."""
    import json

    from seer_sglang.sim.spec_model import SpecModel, alpha_for_length

    for length in (1.0, 1.4, 2.5, 8.9):
        alpha = alpha_for_length(length, 8)
        assert sum(alpha ** i for i in range(9)) == pytest.approx(length, abs=1e-6)
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"config": {"draft_tokens": 8},
                                "acceptance_by_references": {"group-suffix": {"0": 1.3, "3": 1.5, "15": 2.1}}}))
    spec = SpecModel.from_replay(path)
    lengths = {n: sum(spec.alpha(n, 16) ** i for i in range(9)) for n in (0, 3, 15)}
    assert lengths == pytest.approx({0: 1.3, 3: 1.5, 15: 2.1}, abs=1e-6)
    assert spec.alpha(0, 16) < spec.alpha(2, 16) < spec.alpha(3, 16) < spec.alpha(9, 16) < spec.alpha(15, 16)
    assert dataclasses.replace(spec, grouped=False).alpha(15, 16) == spec.alpha(0, 16)
    # measured with the whole group decoding at once: that curve, not the lone-sample references
    path.write_text(json.dumps({"config": {"draft_tokens": 8},
                                "acceptance_by_references": {"group-suffix": {"0": 1.3, "15": 2.1}},
                                "acceptance_by_finished": {"group-suffix": {"0": 1.8, "15": 1.7}}}))
    together = SpecModel.from_replay(path)
    assert sum(together.alpha(0, 16) ** i for i in range(9)) == pytest.approx(1.8, abs=1e-6)
    assert sum(together.alpha(15, 16) ** i for i in range(9)) == pytest.approx(1.7, abs=1e-6)
    # the per-request ablation takes the suffix drafter's own acceptance on the text, not the group's
    path.write_text(json.dumps({"config": {"draft_tokens": 8},
                                "acceptance_by_finished": {"group-suffix": {"0": 1.8, "15": 1.7}},
                                "acceptance_together": {"group-suffix": 1.75, "suffix": 1.4}}))
    own = dataclasses.replace(SpecModel.from_replay(path), grouped=False)
    assert all(sum(own.alpha(n, 16) ** i for i in range(9)) == pytest.approx(1.4, abs=1e-6) for n in (0, 15))


def test_a_replayed_texts_samples_keep_their_own_acceptance(tmp_path):
    """On the text a workload replays, each sample drafts at its own measured acceptance whatever the
    curve by finished siblings says, in the workload of its seed only; the per-request ablation,
    other workloads and samples the replay lacks keep the curve."""
    import json

    from seer_sglang.sim.spec_model import SpecModel, length_for_alpha

    path = tmp_path / "replay.json"
    path.write_text(json.dumps({"config": {"draft_tokens": 8, "outputs": "text.json"},
                                "acceptance_by_finished": {"group-suffix": {"0": 1.9, "15": 1.6}},
                                "acceptance_together": {"group-suffix": 1.8, "suffix": 1.4},
                                "acceptance_by_sample": {"group-suffix": {"0:2:5": 2.7, "0:2:6": 1.2,
                                                                          "1:2:5": 1.0}}}))
    spec = SpecModel.from_replay(path, seed=0, text="text.json")
    for finished in (0, 3, 15):
        base = spec.alpha(finished, 16)
        assert length_for_alpha(spec.sample_alpha(base, (2, 5)), 8) == pytest.approx(2.7, abs=1e-6)
        assert length_for_alpha(spec.sample_alpha(base, (2, 6)), 8) == pytest.approx(1.2, abs=1e-6)
        assert spec.sample_alpha(base, (7, 0)) == base and spec.sample_alpha(base, None) == base
        assert dataclasses.replace(spec, grouped=False).sample_alpha(base, (2, 5)) == base
    base = spec.alpha(3, 16)
    assert SpecModel.from_replay(path).sample_alpha(base, (2, 5)) == base  # not this text's workload
    assert SpecModel.from_replay(path, seed=0, text="other.json").sample_alpha(base, (2, 5)) == base
    assert length_for_alpha(SpecModel.from_replay(path, seed=1, text="text.json").sample_alpha(base, (2, 5)), 8) == \
        pytest.approx(1.0, abs=1e-6)
    # the recording itself, where it is there: the simulator drafts it (TextDrafts)
    recording = tmp_path / "text.json"
    recording.write_text(json.dumps({"workloads": [{"seed": 0, "groups": [{"prompt": [1, 2], "outputs": [[5, 6], [7]]}]}]}))
    path.write_text(path.read_text().replace('"text.json"', json.dumps(str(recording))))
    held = SpecModel.from_replay(path, seed=0, text=str(recording))
    assert held.texts == {(0, 0): (5, 6), (0, 1): (7,)} and held.prompts == {0: (1, 2)}
    assert held.text_drafts() is not None and "drafted over the replayed text" in held.source
    assert not SpecModel.from_replay(path, seed=1, text=str(recording)).texts  # no workload of that seed
    assert not SpecModel.from_replay(path, seed=0, text="text.json").texts  # measured on another text


def test_verify_tokens_cost_compute_on_a_gpu_profile():
    """On a GPU profile a verify step is one step of B sequences and T tree nodes, priced by the step model
    as the emulated instances price it: free while the step is memory-bound, compute once it is not."""
    from seer_sglang.core.step_model import load_profile
    from seer_sglang.sim.spec_model import SpecModel

    gpu = load_profile("h100-70b")
    assert SpecModel().token_cost(gpu) == 0.0 and SpecModel().token_cost(SMALL) == SMALL.prefill_per_token_s
    assert gpu.decode_steps(1, 4, 1000, tokens=36) == pytest.approx(gpu.decode_step(4, 1000, 36))
    assert gpu.decode_steps(1, 64, 1000, tokens=64 * 9) > gpu.decode_steps(1, 64, 1000) > gpu.decode_steps(1, 4, 1000)
    # KV grows by the tokens the steps emit, not one per sequence
    assert gpu.decode_steps(10, 4, 1000, growth=12) > gpu.decode_steps(10, 4, 1000)


def test_chunk_return_overhead_delays_only_the_router(trace):
    """A chunk reaches the router request_overhead_s after its last step: more chunks cost more time,
    and every sample still ends exactly."""
    slow = dataclasses.replace(SMALL, request_overhead_s=0.5)
    results = {}
    for name, chunk in (("group", None), ("context", 256)):
        fast_run = simulate(trace, make_policy(name, chunk_size=chunk), SMALL, instances=4, max_tokens=4096)
        slow_run = simulate(trace, make_policy(name, chunk_size=chunk), slow, instances=4, max_tokens=4096)
        assert slow_run.total_tokens == fast_run.total_tokens and len(slow_run.finish_times) == len(trace)
        results[name] = slow_run.completion_s - fast_run.completion_s
    assert 0 < results["group"] < results["context"]  # one chunk per sample vs many


def test_retraction_takes_sglangs_victim_the_fewest_output_tokens_first(trace):
    """SGLang retracts the request with the fewest output tokens, the longest input among equals."""
    from seer_sglang.sim.simulator import Simulation, Slot

    tight = dataclasses.replace(SMALL, capacity_tokens=0)
    sim = Simulation(trace, make_policy("group"), tight, instances=1, max_tokens=4096)
    inst = sim.instances[0]
    samples = [s for g in sim.groups[:2] for s in g.samples[:2]]
    produced = {samples[0].rid: 30, samples[1].rid: 5, samples[2].rid: 5, samples[3].rid: 60}
    for s in samples:
        s.output_ids.n = produced[s.rid]
    inst.running = [Slot(sim.router.launch(s, 0, 100, 0.0), produced=produced[s.rid]) for s in samples]
    longer_input = max(samples[1:3], key=lambda s: len(s.prompt_ids))
    sim._retract_until_fits(inst)  # nothing fits: all but one leave, in SGLang's order, to the queue's end
    order = [slot.sample.rid for slot in inst.waiting]
    assert order[0] == longer_input.rid and set(order[:2]) == {samples[1].rid, samples[2].rid}
    assert order[2] == samples[0].rid and [s.sample.rid for s in inst.running] == [samples[3].rid]


def test_retraction_among_equals_takes_the_latest_admitted_and_queues_it_behind_the_waiting(trace):
    """SGLang's stable sort keeps equal requests in batch order and retracts from the end; the scheduler
    appends the retracted request behind the requests already waiting (FCFS)."""
    from seer_sglang.sim.simulator import Simulation, Slot

    sim = Simulation(trace, make_policy("group"), dataclasses.replace(SMALL, capacity_tokens=0), instances=1,
                     max_tokens=4096)
    inst = sim.instances[0]
    siblings = sim.groups[0].samples[:4]  # one prompt: equal inputs
    for s in siblings:
        s.output_ids.n = 7
    inst.running = [Slot(sim.router.launch(s, 0, 100, 0.0), produced=7) for s in siblings[:3]]
    inst.waiting.append(Slot(sim.router.launch(siblings[3], 0, 100, 0.0), produced=7))
    sim._retract_until_fits(inst)
    assert [s.sample.rid for s in inst.running] == [siblings[0].rid]
    assert [s.sample.rid for s in inst.waiting] == [siblings[3].rid, siblings[2].rid, siblings[1].rid]


def test_kv_cap_holds_the_asked_share_of_each_instances_working_set(trace):
    prompts = {s.group_id: s.prompt_len for s in trace}  # siblings share their prompt's KV
    working = sum(prompts.values()) + sum(s.output_len for s in trace)
    assert kv_cap(trace, 4, 0.5) == int(working / 8)
    assert PRESETS["qwen2vl"].scaled(256).kv_share == 0.5


def test_after_a_retraction_admission_follows_sglangs_new_ratio(trace):
    """SGLang sets the reserve ratio to (written + retract_steps per request) / budgets of those left."""
    from seer_sglang.core.step_model import Admission
    from seer_sglang.sim.simulator import Simulation, Slot

    rule = Admission(retract_steps=3)
    sim = Simulation(trace, make_policy("group"), dataclasses.replace(SMALL, capacity_tokens=0), instances=1,
                     max_tokens=4096, admission=rule)
    inst = sim.instances[0]
    samples = [s for s in sim.groups[0].samples[:3]]
    inst.running = [Slot(sim.router.launch(s, 0, 100, 0.0), produced=10 * (i + 1)) for i, s in enumerate(samples)]
    sim._retract_until_fits(inst)
    assert len(inst.running) == 1 and inst.new_token_ratio == pytest.approx((30 + 3) / 101)


# batch-bound decode steps and room for the whole rollout: a request beside it waits several times a lone step
SLO_MODEL = dataclasses.replace(SMALL, decode_base_s=0.005, decode_per_seq_s=3e-4, capacity_tokens=200_000)


def _slo_setup(trace, strict_factor: float):
    """SLO traffic beside a rollout on SLO_MODEL: a strict class at ``strict_factor`` of the TPOT a plain
    priority request gets beside the rollout, a loose one at 1.5x that."""
    import statistics

    from seer_sglang.core.slo import SLO
    from seer_sglang.sim.simulator import Simulation
    from seer_sglang.sim.workload import slo_arrivals

    probe = Simulation(trace, make_policy("round-robin"), SLO_MODEL, 2, 4096, slo_mechanism=False,
                       slo_traffic=slo_arrivals({"probe": SLO(100.0, 100.0)}, [1.0], 4.0, 2.0, 32))
    probe.run()
    beside = statistics.median(r["tpot_s"] for r in probe.slo_records)
    strict = strict_factor * beside
    classes = {"strict": SLO(ttft_s=1.0, tpot_s=strict), "loose": SLO(ttft_s=1.0, tpot_s=1.5 * strict)}
    return beside, slo_arrivals(classes, [2.0, 4.0], 4.0, 2.0, 32, seed=3)


def test_slo_requests_in_the_simulator_take_seers_path(trace):
    """Plain priority requests share every decode step of the rollout and miss a TPOT SLO below it;
    through route_slo, screen and plan_step the same requests meet it, the rollout's samples still end
    exactly, and the rollout pays for it in deferred steps."""
    beside, arrivals = _slo_setup(trace, 0.7)
    assert SLO_MODEL.decode_step(1, 0) < 0.7 * SLO_HEADROOM * beside  # a lone request could meet it
    plain = simulate(trace, make_policy("round-robin"), SLO_MODEL, 2, 4096, slo_traffic=arrivals, slo_mechanism=False)
    seer = simulate(trace, make_policy("context", chunk_size=512), SLO_MODEL, 2, 4096, slo_traffic=arrivals)
    for r in (plain, seer):
        assert r.total_tokens == sum(s.output_len for s in trace) and len(r.finish_times) == len(trace)
        assert r.slo["requests"] == len(arrivals)
    assert plain.slo["per_class"]["strict"]["slo_attainment"] < 0.5 and plain.slo["rejected"] == 0
    assert seer.slo["slo_attainment"] >= 0.95 and seer.slo["admitted"] >= 0.9 * len(arrivals)
    assert 0 < seer.slo["best_effort_deferred_share"] < 1 and plain.slo["best_effort_deferred_share"] == 0


def test_slo_requests_that_cannot_be_met_are_refused_and_change_nothing(trace):
    """A TPOT SLO below a lone request's step is refused at the router, and the rollout runs exactly as
    it does with no SLO traffic at all."""
    from seer_sglang.core.slo import SLO
    from seer_sglang.sim.workload import slo_arrivals

    hopeless = slo_arrivals({"x": SLO(ttft_s=1.0, tpot_s=0.5 * SLO_MODEL.decode_step(1, 0))}, [4.0], 4.0, 1.0, 32)
    alone = simulate(trace, make_policy("context", chunk_size=512), SLO_MODEL, 2, 4096)
    beside = simulate(trace, make_policy("context", chunk_size=512), SLO_MODEL, 2, 4096, slo_traffic=hopeless)
    assert beside.slo["rejected"] == len(hopeless) > 0 and beside.slo["admitted"] == 0
    # the same steps; an arrival may split a simulated span of steps in two, which rounds differently
    assert beside.finish_times == pytest.approx(alone.finish_times, rel=1e-12, abs=1e-9)


def test_slo_arrivals_rise_phase_by_phase_and_take_turns():
    from seer_sglang.core.slo import SLO
    from seer_sglang.sim.workload import slo_arrivals

    classes = {"strict": SLO(ttft_s=1.0, tpot_s=0.02), "loose": SLO(ttft_s=1.0, tpot_s=0.04)}
    arrivals = slo_arrivals(classes, [2.0, 8.0], 50.0, 10.0, 32, seed=1)
    times = [a.arrival_s for a in arrivals]
    assert times == sorted(times) and 10.0 < times[0] and times[-1] < 110.0
    counts = [sum(1 for a in arrivals if a.phase == p) for p in (0, 1)]
    assert 70 < counts[0] < 130 and 320 < counts[1] < 480  # Poisson: 100 and 400 expected
    assert [a.slo_class for a in arrivals[:4]] == ["strict", "loose", "strict", "loose"]
    assert all(a.slo is classes[a.slo_class] and a.output_len == 32 and 8 <= a.prompt_len <= 32 for a in arrivals)
    assert slo_arrivals(classes, [2.0, 8.0], 50.0, 10.0, 32, seed=1) == arrivals  # seeded


def test_slo_arrivals_skip_a_quiet_phase_and_keep_the_others():
    """A phase of rate 0 sends nothing, and the phase after it starts on time."""
    from seer_sglang.core.slo import SLO
    from seer_sglang.sim.workload import slo_arrivals

    classes = {"a": SLO(1.0, 0.1)}
    quiet = slo_arrivals(classes, [0.0, 3.0], 5.0, 1.0, 16, seed=7)
    assert quiet and all(a.phase == 1 and 6.0 <= a.arrival_s < 11.0 for a in quiet)
    assert slo_arrivals(classes, [0.0, 0.0], 5.0, 1.0, 16) == []


def test_the_simulators_budget_prices_a_gpu_profile_as_the_emulated_instances_do():
    """One cost model for both: the budget's verify step is the profile's roofline, so at a small batch
    on a memory-bound profile it drafts more than a budget that priced every verified token."""
    from seer_sglang.core.step_model import load_profile
    from seer_sglang.sim.spec_model import SpecModel
    from seer_sglang.speculative.budget import CostModel, make_budget

    gpu = load_profile("h100-70b")
    spec = SpecModel()
    cost = spec.budget(gpu).cost
    assert cost == CostModel.from_step_model(gpu, cost.accept_curve) and cost.memory_s == gpu.weight_read_s
    emulated = make_budget("adaptive", spec.gamma_max, times=gpu).online.times
    assert emulated.step_time(16, 9) == pytest.approx(cost.step_time(16, 9))
    linear = dataclasses.replace(cost, base_s=cost.base_s + cost.memory_s, memory_s=0.0)
    assert cost.best_gamma(16, spec.gamma_max) > linear.best_gamma(16, spec.gamma_max)


def test_sim_bounds_seeds_and_the_papers_acceptance():
    from benchmarks.sim_bounds import SEER_ACCEPTANCE, parse_seeds, seer_spec

    assert parse_seeds("0-2,5", [9]) == [0, 1, 2, 5] and parse_seeds(None, [9]) == [9]
    spec = seer_spec("seer-linear")
    for n, length in SEER_ACCEPTANCE["seer-linear"]:  # the chain acceptance gives the reported length back
        a = spec.alpha(n, 16)
        assert sum(a ** i for i in range(spec.gamma_max + 1)) == pytest.approx(length, rel=1e-6)


def test_sim_bounds_ratios_pool_the_workloads_and_keep_each_ones_range():
    """A mode against a plain SGLang on the same workloads: throughput is the total time over the total,
    each workload's own ratio gives the range, and the tail is the mean tail over the mean."""
    from types import SimpleNamespace

    from benchmarks.sim_bounds import against

    def runs(*pairs):
        return [SimpleNamespace(completion_s=c, tail_s=t, efficiency=0.5, mean_acceptance_length=None)
                for c, t in pairs]

    got = against(runs((100.0, 20.0), (300.0, 40.0)), runs((80.0, 10.0), (200.0, 20.0)))
    assert got["throughput"] == pytest.approx(400 / 280)
    assert (got["min"], got["max"]) == (pytest.approx(1.25), pytest.approx(1.5))
    assert got["tail"] == pytest.approx(15 / 30) and got["mean_acceptance_length"] is None


def test_the_cache_shares_a_prompt_among_siblings_as_sglangs_radix_tree(trace):
    """A sample's cached context is its own tokens below its group's prompt: the prompt counts once
    however many siblings cached theirs, a sibling's continuation hits prompt and own tokens, and the
    prompt is evicted only after every sample cached below it (least recently used first)."""
    from seer_sglang.sim.simulator import Simulation

    sim = Simulation(trace, make_policy("group"), dataclasses.replace(SMALL, capacity_tokens=120), instances=1,
                     max_tokens=4096)
    inst = sim.instances[0]
    inst.remember("s:a", 40 + 10, group="g1", prompt=40)
    inst.remember("s:b", 40 + 20, group="g1", prompt=40)
    assert sum(inst.cache.values()) == 70  # the prompt once: 40 + 10 + 20
    assert list(inst.cache) == ["s:a", "p:g1", "s:b"]
    inst.remember("s:c", 30 + 25, group="g2", prompt=30)  # 125 tokens: the least recent sample goes
    assert list(inst.cache) == ["p:g1", "s:b", "p:g2", "s:c"] and sum(inst.cache.values()) == 115
    inst.remember("s:d", 30 + 35, group="g2", prompt=30)  # 150: p:g1 is older, but b lies below it
    assert list(inst.cache) == ["s:c", "p:g2", "s:d"]  # b went, then its prompt, below nothing now
    assert (inst.cached("s:c"), inst.cached("s:d"), inst.cached("p:g2"), inst.cached("s:a")) == (55, 65, 30, 0)


def test_a_verify_step_emits_its_expected_tokens_on_average(trace):
    """At 1.4 tokens per verify step a request emits 1.4 per step over many one-step macro steps: the
    fraction carries over instead of being rounded away (1.4 -> 1 each step would cost it 40%); every
    step emits at least its one token, and a chunk never more than it has left."""
    from seer_sglang.sim.simulator import Simulation, Slot

    sim = Simulation(trace, make_policy("group"), SMALL, instances=1, max_tokens=4096)
    sample = sim.groups[0].samples[0]
    sample.oracle_length = 10_000
    slot = Slot(sim.router.launch(sample, 0, 10_000, 0.0))
    made = [slot.emit(1, 1.4) for _ in range(100)]
    assert sum(made) in (139, 140) and set(made) == {1, 2}
    assert slot.emit(3, 1.0) == 3
    short = Slot(sim.router.launch(sample, 0, 2, 0.0))
    assert short.emit(5, 1.9) == 2


def test_a_prefill_samples_each_admitted_requests_first_token():
    """As SGLang's extend step: a request's first token comes from its prefill, so N tokens take the
    prefill and N - 1 decode steps, each chunk of a divided rollout starts with one, and a one-token
    request costs its prefill alone."""
    from seer_sglang.sim.workload import TraceSample

    m = dataclasses.replace(SMALL, decode_per_seq_s=0.0, decode_per_kv_token_s=0.0)
    one = [TraceSample(0, 0, 100, 10)]
    whole = simulate(one, make_policy("round-robin"), m, instances=1, max_tokens=10)
    assert whole.completion_s == pytest.approx(m.prefill(100) + 9 * m.decode_step(1, 0))
    chunked = simulate(one, make_policy("divided", chunk_size=5), m, instances=1, max_tokens=10)
    decode = chunked.completion_s - m.prefill(100) - 8 * m.decode_step(1, 0)  # 2 chunks: 8 decode steps
    assert -1e-12 < decode <= m.prefill(5, 100)  # and the continuation's prefill (its cached context is free)
    single = simulate([TraceSample(0, 0, 100, 1)], make_policy("round-robin"), m, instances=1, max_tokens=1)
    assert single.completion_s == pytest.approx(m.prefill(100)) and single.total_tokens == 1
    # the steps each instance ran, as an emulated instance's step log counts them
    assert whole.decode_steps == [9] and whole.request_steps == [9] and chunked.decode_steps == [8]
    assert single.decode_steps == [0]
    pair = simulate([TraceSample(0, 0, 100, 10), TraceSample(0, 1, 100, 4)], make_policy("round-robin"), m,
                    instances=2, max_tokens=10)
    # one group: one instance; the 4-token sample ends on EOS, so it runs one more step (overlap scheduler)
    assert pair.decode_steps == [9, 0] and pair.request_steps == [9 + 3 + 1, 0]


def test_siblings_share_an_uncached_prompt_only_with_the_plugin():
    """Plain SGLang's prefill batch computes an uncached prompt once for every sibling in it (and holds
    each copy until the batch ends); the plugin's queue hook prefills one sibling and the rest a batch
    later, from the cache. A prompt shorter than MIN_SHARED_PREFILL is not worth the wait: the plugin
    leaves those siblings in the batch, which computes it for each."""
    from seer_sglang.config import MIN_SHARED_PREFILL
    from seer_sglang.sim.workload import TraceSample

    group = [TraceSample(0, i, 100, 20) for i in range(4)]
    plain = simulate(group, make_policy("round-robin"), SMALL, instances=1, max_tokens=20, plain=True)
    seer = simulate(group, make_policy("round-robin"), SMALL, instances=1, max_tokens=20)
    assert plain.prefill_tokens == 4 * 100 and seer.prefill_tokens == 100
    assert plain.total_tokens == seer.total_tokens == 80
    assert seer.completion_s > SMALL.prefill(100) + 19 * SMALL.decode_step(1, 0)  # the siblings came a step later
    short = [TraceSample(0, i, MIN_SHARED_PREFILL - 1, 20) for i in range(4)]
    at_once = simulate(short, make_policy("round-robin"), SMALL, instances=1, max_tokens=20)
    assert at_once.prefill_tokens == 4 * (MIN_SHARED_PREFILL - 1)  # one batch, as plain SGLang


def test_a_request_sent_mid_step_joins_at_the_next_step_boundary():
    """SGLang reads new requests between two decode steps: a request that reaches an instance while it
    decodes a lone long sample is prefilled right after that step, not after a longer simulated span."""
    from seer_sglang.core.slo import SLO
    from seer_sglang.sim.simulator import Simulation
    from seer_sglang.sim.workload import SLOArrival, TraceSample

    step = SMALL.decode_step(1, 1000)
    for arrival_s in (0.5 * step, 7.3 * step, 40.6 * step):
        probe = SLOArrival(arrival_s, prompt_len=16, output_len=4, slo=SLO(100.0, 100.0), slo_class="probe")
        sim = Simulation([TraceSample(0, 0, 100, 2000)], make_policy("round-robin"), SMALL, 1, 4096,
                         slo_traffic=[probe], slo_mechanism=False)
        sim.run()
        ttft = sim.slo_records[0]["ttft_s"]  # the rest of the step under way, then its prefill step
        assert ttft <= 2 * step + SMALL.prefill(16), (arrival_s, ttft)  # (which decodes the batch too)


def test_a_continuation_misses_the_step_its_instance_starts_meanwhile():
    """SGLang sends a finished chunk's output and starts its next step at once; the continuation comes
    back through the router, so it starts a step later, even with no round-trip time at all."""
    from seer_sglang.sim.simulator import Simulation
    from seer_sglang.sim.workload import TraceSample

    m = dataclasses.replace(SMALL, decode_per_seq_s=0.0, decode_per_kv_token_s=0.0)
    admitted = {}

    class Watched(Simulation):
        def _admit(self, inst):
            prefill_s, slots = super()._admit(inst)
            for slot in slots:
                admitted.setdefault((slot.sample.index, len(slot.sample.chunks)), self.now)
            return prefill_s, slots

    sim = Watched([TraceSample(0, 0, 100, 10), TraceSample(0, 1, 100, 40)], make_policy("divided", chunk_size=5),
                  m, 1, 64)
    sim.run()
    first = next(s for s in sim.groups[0].samples if s.index == 0)
    ended = first.chunks[0].end
    assert first.chunks[1].start == ended  # the router sends it at once
    assert admitted[(0, 2)] == pytest.approx(ended + m.decode_step(1, 0))  # after the sibling's next step


def test_on_a_replayed_text_a_verify_step_drafts_it_with_the_instances_drafter_and_budget():
    """With the recorded text, a verify step drafts over what every sample has committed so far, with
    the instances' drafter, keeps what the budget gives, and accepts the drafts the text bears out: a
    sample following a finished sibling with the same text accepts every draft it verifies; one whose
    text nothing matches gets none."""
    import random

    from seer_sglang.sim.text_drafts import TextDrafts
    from seer_sglang.speculative.budget import make_budget

    rng = random.Random(0)
    text = [rng.randrange(1000) for _ in range(60)]
    other = [rng.randrange(1000, 2000) for _ in range(60)]
    drafts = TextDrafts({(0, 0): text, (0, 1): text, (0, 2): other}, {0: [1, 2, 3]})
    drafts.feed((0, 0), "a", 60)  # a sibling wrote the whole text
    drafts.feed((0, 1), "b", 1)
    drafts.feed((0, 2), "c", 1)
    made, verified, gamma = drafts.verify([((0, 1), "b", 1), ((0, 2), "c", 1)], [False, False],
                                          make_budget("full", 8))
    assert gamma == 8 and verified[0] >= 2 and made[0] == 1 + verified[0]
    assert verified[1] == 0 and made[1] == 1
    # the budget's share decides how many of the drafted nodes are verified
    drafts.feed((0, 1), "b", 1 + made[0])
    made, verified, _ = drafts.verify([((0, 1), "b", 1 + made[0])], [False], make_budget("threshold", 1))
    assert verified == [1] and made == [2]


def test_a_token_reaches_other_instances_drafters_a_sync_interval_after_its_step_ends():
    """Each instance drafts from its own replica: a sibling's tokens committed on another instance by a
    step ending at ``at`` are drafted from only from ``at + lag_s``; on their own instance at once, and a
    request's own tokens always (a continuation brings them along)."""
    import random

    from seer_sglang.sim.text_drafts import TextDrafts
    from seer_sglang.speculative.budget import make_budget

    rng = random.Random(2)
    text = [rng.randrange(1000) for _ in range(40)]
    drafts = TextDrafts({(0, 0): text, (0, 1): text}, {0: [1, 2, 3]}, replicas=2, lag_s=0.5)
    drafts.feed((0, 0), "a", 40, replica=0, at=1.0)  # a sibling on instance 0 wrote the whole text

    def step(replica: int, now: float) -> int:
        made, _, _ = drafts.verify([((0, 1), "b", 1)], [False], make_budget("full", 8), replica, now)
        return made[0]

    assert step(1, 1.2) == 1  # not on instance 1 yet
    assert step(0, 1.2) > 2  # instance 0 has it
    assert step(1, 1.5) > 2  # arrived on instance 1
    own = TextDrafts({(0, 0): text * 2}, {0: [1, 2, 3]}, replicas=2, lag_s=100.0)
    own.feed((0, 0), "a", 45, replica=0, at=0.0)  # its first chunk on instance 0, then it moves
    made, _, _ = own.verify([((0, 0), "a", 45)], [False], make_budget("full", 8), 1, 1.0)
    assert made[0] > 2  # its own repeating text drafts on instance 1 long before the lag


def test_the_simulator_drafts_a_replayed_text_step_by_step():
    """A ``SpecModel`` holding the replayed text makes the simulator draft it: a text that repeats itself
    accepts drafts and finishes sooner; one that never repeats accepts none. Every token is made once."""
    import random

    from seer_sglang.sim.spec_model import SpecModel
    from seer_sglang.sim.workload import TraceSample

    rng = random.Random(1)
    cycle = [rng.randrange(1000) for _ in range(6)]
    periodic = {(0, i): tuple(cycle * 12) for i in range(2)}
    noise = {(0, i): tuple(rng.randrange(10 ** 6) for _ in range(72)) for i in range(2)}
    trace = [TraceSample(0, i, 3, 72) for i in range(2)]
    runs = {name: simulate(trace, make_policy("divided", chunk_size=16), SMALL, 1, 72,
                           spec=SpecModel(texts=texts, prompts={0: (1, 2, 3)}))
            for name, texts in (("periodic", periodic), ("noise", noise))}
    assert all(r.total_tokens == 144 for r in runs.values())
    assert runs["noise"].mean_acceptance_length == pytest.approx(1.0)
    assert runs["periodic"].mean_acceptance_length > 2.0
    assert runs["periodic"].completion_s < runs["noise"].completion_s
    # what each verify step committed, by where it fell: one instance, so every continuation stayed; a
    # chunk's last step is not counted (the step log has no next length to count it by)
    committed = runs["periodic"].committed
    chunks = 2 * math.ceil(72 / 16)
    assert set(committed) == {"first, step 1", "first, step 2+", "stayed, step 1", "stayed, step 2+"}
    assert len(committed["first, step 1"]) == 2 and len(committed["stayed, step 1"]) == 2 * (72 // 16)
    assert sum(map(len, committed.values())) == sum(runs["periodic"].request_steps) - chunks
    assert sum(map(sum, committed.values())) < 144 - chunks


def test_a_request_joins_its_instance_when_it_arrives():
    """``arrival_s``: a sample's first request reaches its instance that long after it was sent; the
    instance runs what has arrived, and takes a late request in at the next step boundary."""
    from seer_sglang.sim.workload import TraceSample

    trace = [TraceSample(0, 0, 10, 40), TraceSample(0, 1, 10, 40)]
    at_once = simulate(trace, make_policy("round-robin"), SMALL, 1, 64, plain=True)
    late = simulate(trace, make_policy("round-robin"), SMALL, 1, 64, plain=True, arrival_s={(0, 1): 1.0})
    alone = 40 * SMALL.decode_step(1, 0)  # 40 tokens, one request in the batch (~0.4 s)
    assert max(at_once.finish_times) < 1.0  # both ran from the start, together
    assert late.finish_times[0] < 1.0 < late.finish_times[1]
    assert late.finish_times[1] - 1.0 == pytest.approx(late.finish_times[0], rel=0.05)  # the same run, later
    assert late.finish_times[1] - 1.0 >= 0.9 * alone


def test_a_bucketed_verify_costs_its_padding():
    """``+sd-bucketed`` takes the budget's decisions of ``+sd`` and computes every request padded to the
    step's bucket: on a step model where each verified token costs its own compute (a CPU's) that is
    slower than the ragged verify; on a GPU profile's roofline, where a small batch's step is
    memory-bound, the padding is all but free."""
    import dataclasses

    from seer_sglang.core.step_model import load_profile
    from seer_sglang.sim.__main__ import run_policies

    spec = PRESETS["qwen2vl"].scaled(256, (40, 90))
    trace = generate(spec, 16, 0)
    modes = ("round-robin", "context+sd", "context+sd-bucketed")
    cpu = load_profile("cpu-smollm2")
    cpu = dataclasses.replace(cpu, capacity_tokens=kv_cap(trace, 2, 0.5))
    out = run_policies(trace, cpu, 2, 256, 32, modes)
    assert out["context+sd-bucketed"]["completion_s"] > 1.1 * out["context+sd"]["completion_s"]
    gpu = load_profile("h100-70b").scaled(256 / 40_960, 10)
    gpu = dataclasses.replace(gpu, capacity_tokens=kv_cap(trace, 2, 0.5))
    out = run_policies(trace, gpu, 2, 256, 32, modes)
    assert out["context+sd-bucketed"]["completion_s"] == pytest.approx(out["context+sd"]["completion_s"], rel=0.01)


def test_a_ragged_verify_on_a_replayed_text_costs_the_drafts_given_out():
    """On the replayed text a ragged verify computes each request's own drafts (``_CompactVerify``, whose
    tokens the emulated instances price), not the batch padded to its widest request: a request that
    drafts a repeating text beside one that drafts nothing costs its own drafts only. The bucketed
    verify pads both to the step's bucket."""
    import random

    from seer_sglang.sim.simulator import Simulation, Slot
    from seer_sglang.sim.spec_model import SpecModel
    from seer_sglang.sim.workload import TraceSample

    rng = random.Random(3)
    cycle = [rng.randrange(1000) for _ in range(5)]
    texts = {(0, 0): tuple(cycle * 12), (0, 1): tuple(rng.randrange(10 ** 6) for _ in range(60))}
    trace = [TraceSample(0, 0, 3, 60), TraceSample(0, 1, 3, 60)]
    drafts = {}
    for layout in ("auto", "bucketed"):
        spec = SpecModel(texts=texts, prompts={0: (1, 2, 3)}, budget_name="full", verify_layout=layout)
        sim = Simulation(trace, make_policy("group"), SMALL, instances=1, max_tokens=60, spec=spec)
        inst = sim.instances[0]
        inst.running = [Slot(sim.router.launch(s, 0, 60, 0.0), produced=20) for s in sim.groups[0].samples]
        for slot in inst.running:
            slot.sample.output_ids.n = 20
            sim._feed(slot, inst, 0.0)
        made, drafts[layout], record = sim._spec_rates(inst.running, inst)
        verified = record[2]
        assert verified[0] >= 4 and verified[1] == 0 and made[0] > 2 and made[1] == 1
        if layout == "auto":
            assert drafts[layout] == verified[0]
    assert drafts["bucketed"] >= 2 * drafts["auto"]


def test_seers_instances_admit_by_the_routers_priority_plain_ones_first_come():
    """The plugin re-sorts a seer instance's waiting queue by the router's priorities, groups by their
    best member and siblings together (``core.queue_order``); plain SGLang admits first come, first served."""
    from seer_sglang.config import MIN_SHARED_PREFILL
    from seer_sglang.core.router import Launch
    from seer_sglang.sim.simulator import Simulation, Slot
    from seer_sglang.sim.workload import TraceSample

    trace = [TraceSample(g, i, MIN_SHARED_PREFILL - 1, 8) for g in (0, 1) for i in (0, 1)]
    order = {}
    for plain in (False, True):
        sim = Simulation(trace, make_policy("context"), dataclasses.replace(SMALL, max_running=3), 1, 8, plain=plain)
        inst = sim.instances[0]
        samples = [s for g in sim.groups for s in g.samples]
        for sample, prio in zip(samples, [1, 5, 3, None]):
            inst.waiting.append(Slot(Launch(sample, 0, 8, 0, None, prio)))
        _, admitted = sim._admit(inst)
        order[plain] = [slot.sample.rid for slot in admitted]
    assert order[False] == ["g0-1", "g0-0", "g1-0"] and order[True] == ["g0-0", "g0-1", "g1-0"]


def test_a_request_without_kv_room_closes_admission_until_a_request_leaves():
    """SGLang's ``batch_is_full``: once a waiting request finds no KV room, the scheduler tries no prefill
    until a running request leaves, however far the reserve ratio has fallen since. Two long requests
    fill an instance's room at the first ratio; a third, short one fits a few steps later, once the ratio
    has decayed, but starts only when the first of them ends."""
    from seer_sglang.core.step_model import Admission
    from seer_sglang.sim.workload import TraceSample

    m = dataclasses.replace(SMALL, capacity_tokens=120, decode_per_seq_s=0.0, decode_per_kv_token_s=0.0)
    trace = [TraceSample(0, 0, 10, 40), TraceSample(1, 0, 10, 40), TraceSample(2, 0, 10, 1)]
    rule = Admission(decay_steps=4)
    result = simulate(trace, make_policy("round-robin"), m, instances=1, max_tokens=40, admission=rule, plain=True)
    long_end = m.prefill(20) + 39 * m.decode_step(2, 0)
    # the short request ends last: it was admitted once a long one left, not as soon as it would fit
    assert min(result.finish_times) == pytest.approx(long_end, rel=0.05)
    assert result.completion_s > long_end


def test_under_the_overlap_scheduler_a_request_ending_on_eos_runs_one_more_step():
    """SGLang forms the next batch before it has seen the last step's tokens and leaves out only the
    requests whose next token is their ``max_new_tokens``-th (``Scheduler._reqs_finishing_inflight``).
    A request that ends on EOS runs one more decode step, and its answer goes out after it; one that
    ends on its length does not."""
    from seer_sglang.sim.workload import TraceSample

    m = dataclasses.replace(SMALL, decode_per_kv_token_s=0.0)
    step = m.decode_step(1, 0)

    def run(output_len: int, max_tokens: int, overlap: bool):
        return simulate([TraceSample(0, 0, 10, output_len)], make_policy("round-robin"), m, instances=1,
                        max_tokens=max_tokens, plain=True, overlap=overlap)

    eos, eos_overlap = run(5, 8, False), run(5, 8, True)
    assert sum(eos_overlap.decode_steps) == sum(eos.decode_steps) + 1
    assert eos_overlap.completion_s == pytest.approx(eos.completion_s + step)
    by_length, by_length_overlap = run(8, 8, False), run(8, 8, True)
    assert sum(by_length_overlap.decode_steps) == sum(by_length.decode_steps)
    assert by_length_overlap.completion_s == pytest.approx(by_length.completion_s)


def test_prompts_that_start_alike_share_their_common_prefix():
    from seer_sglang.sim.simulator import shared_prefixes

    template = [7, 7, 7]
    out = shared_prefixes({"a": template + [1, 2], "b": template + [1, 3], "c": template + [4], "d": [5, 6]})
    assert out["a"] == {"b": 4, "c": 3} and out["b"] == {"a": 4, "c": 3} and out["c"] == {"a": 3, "b": 3}
    assert out["d"] == {}


def test_a_prompt_computes_only_what_no_cached_prompt_of_another_group_holds():
    """SGLang's radix cache matches a new group's prompt against every cached prompt, so a chat template
    that all prompts start with is computed once an instance holds any of them; siblings computed in
    the same prefill batch (plain SGLang's) each compute what is not cached before that batch."""
    from seer_sglang.sim.workload import TraceSample

    template = list(range(100, 140))
    prompts = {0: template + [1] * 20, 1: template + [2] * 30}
    trace = [TraceSample(0, 0, 60, 4), TraceSample(1, 0, 70, 4), TraceSample(1, 1, 70, 4)]

    def tokens(given):
        return simulate(trace, make_policy("round-robin"), SMALL, instances=1, max_tokens=8, plain=True,
                        arrival_s={(0, 0): 0.0, (1, 0): 1.0, (1, 1): 1.0}, prompts=given).prefill_tokens

    # group 0's 60 tokens, then group 1's two siblings in one batch: 30 each past the template
    assert tokens(prompts) == 60 + 2 * 30
    assert tokens(None) == 60 + 2 * 70  # stand-in prompts share nothing
