"""What an emulated rollout's result file records beside the figures: the samples that ended the rollout,
chunk by chunk, and a simulator check that the current simulator gives back."""

import pytest

from benchmarks.harness.manifest import by_label
from benchmarks.harness.result import ROOT


def test_last_samples_are_the_latest_to_end_with_their_chunks_from_the_rollouts_start():
    from benchmarks.harness.rollout_metrics import LAST_SAMPLES, last_samples

    def sample(rid: str, end: float, chunks: list[tuple[int, float, float, int]]) -> dict:
        return {"rid": rid, "completion_tokens": sum(c[3] for c in chunks), "spec": None,
                "timing": {"submitted_at": 100.0, "latency_s": end - 100.0},
                "chunks": [{"instance": i, "start": a, "end": b, "tokens": n, "spec": {"draft_steps": n}}
                           for i, a, b, n in chunks]}

    samples = [sample(f"g-{k}", 100.0 + 10 * k, [(k % 2, 100.0, 100.0 + 10 * k, 4 * k)]) for k in range(1, 6)]
    samples.append(sample("g-9", 190.0, [(0, 100.0, 150.0, 32), (1, 151.0, 190.0, 20)]))
    last = last_samples(samples, start=100.0)
    assert [s["rid"] for s in last] == ["g-4", "g-5", "g-9"][-LAST_SAMPLES:]
    assert last[-1]["end_s"] == pytest.approx(90.0) and last[-1]["tokens"] == 52
    assert [(c["instance"], c["start_s"], c["end_s"], c["tokens"]) for c in last[-1]["chunks"]] == \
        [(0, 0.0, 50.0, 32), (1, 51.0, 90.0, 20)]


def test_a_stored_emulated_runs_simulator_check_is_what_the_simulator_gives_now():
    """The tables quote each run's ``sim_check`` and the newest stored recheck of it: a change to the
    simulator must be rechecked into a stored recheck (``python -m benchmarks.sim_recheck --out``), which
    the simulator then gives back to the last digit. A recheck rebuilds the run's workload, step model,
    KV and admission exactly, so it gives the run's own check back up to what the simulator changed
    since: seer's queues served in the router's priority order and priorities that compare across
    dispatch calls (``context+sd``, under 1% here), SGLang's overlap scheduler, under which a
    request that ends on EOS runs one more decode step, and the radix cache matching a prompt against
    other groups' cached ones, which makes plain SGLang's duplicate prompts cheaper (plain SGLang, the
    two together under 2% here; no retraction)."""
    from benchmarks.harness.manifest import latest_recheck
    from benchmarks.harness.simulate import recheck

    label = "emulated_h100_qwen2vl_seerload_plain_sample_x45"
    run, latest = by_label()[label].load(), latest_recheck(label)["now"]
    check = recheck(run)
    assert set(check) == set(run["sim_check"]) == set(latest) == {"plain-sample", "plain-router-p2", "context+sd"}
    for mode, stored in run["sim_check"].items():
        assert check[mode]["predicted_s"] == pytest.approx(latest[mode]["predicted_s"], rel=1e-9), mode
        assert check[mode]["predicted_retractions"] == latest[mode]["predicted_retractions"], mode
        assert check[mode]["predicted_s"] == pytest.approx(stored["predicted_s"], rel=0.02), mode
        assert check[mode]["predicted_s"] != pytest.approx(stored["predicted_s"], rel=1e-9), mode
        assert check[mode]["predicted_retractions"] == stored["predicted_retractions"] == 0, mode
        # beside it, the steps: the instances' own counters, and the simulator's within a few percent
        real = check[mode]["steps"]["real"]
        counters = run["emulation"]["per_mode"][mode]
        assert real["prefill_steps"] == pytest.approx(
            sum(c["kinds"]["prefill"]["steps"] for c in counters) / len(counters)), mode
        predicted = check[mode]["steps"]["predicted"]
        assert predicted["decode_steps"] == pytest.approx(real["decode_steps"], rel=0.1), mode
        assert predicted["decode_s"] + predicted["prefill_s"] == pytest.approx(
            real["decode_s"] + real["prefill_s"], rel=0.1), mode


def test_a_run_emulated_on_a_profile_file_is_rebuilt_from_where_the_file_is_stored_now():
    """A run names its profile file by the path it had when the run was made; the recheck finds it in
    its run folder now (``manifest.resolve``) and pads to the same measured profile."""
    from benchmarks.harness.simulate import rebuilt

    run = by_label()["emulated_h100_measured_qwen2vl_sd_x45_t0.6_4k"].load()
    assert not (ROOT / run["config"]["emulate"]).exists()
    _, model, _, _ = rebuilt(run)
    assert model.name.startswith("h100-70b-measured@")


def test_the_step_split_sums_each_repeats_instances_and_averages_the_repeats():
    import types

    from benchmarks.harness.simulate import step_split

    runs = [types.SimpleNamespace(prefill_steps=[2, 3], prefill_s=[1.0, 2.0], decode_steps=[10, 20], busy_s=[11.0, 22.0]),
            types.SimpleNamespace(prefill_steps=[1, 1], prefill_s=[0.5, 0.5], decode_steps=[10, 10], busy_s=[5.5, 5.5])]
    counters = [{"kinds": {"prefill": {"steps": 7, "model_s": 4.0}, "decode": {"steps": 25, "model_s": 20.0},
                           "verify": {"steps": 5, "model_s": 6.0}}},
                {"kinds": {"prefill": {"steps": 3, "model_s": 2.0}, "decode": {"steps": 30, "model_s": 24.0}}}]
    split = step_split(runs, counters)
    assert split["predicted"] == {"prefill_steps": 3.5, "prefill_s": 2.0, "decode_steps": 25.0, "decode_s": 20.0}
    assert split["real"] == {"prefill_steps": 5.0, "prefill_s": 3.0, "decode_steps": 30.0, "decode_s": 25.0}


def test_sglang_routers_random_placement_is_predicted_by_the_mean_of_its_draws():
    """``plain-router-p2`` places at random (``BlindPowerOfTwoPolicy``): its prediction is the mean of
    ``RANDOM_DRAWS`` draws, not one draw, and an even placement would predict it too fast."""
    import argparse
    import statistics

    from benchmarks.harness.simulate import RANDOM_DRAWS, client_arrivals, rebuild, simulate_mode
    from seer_sglang.core.policy import BlindPowerOfTwoPolicy, make_policy
    from seer_sglang.sim.simulator import simulate

    config = by_label()["emulated_h100_moonlight_seerload_x45"].load()["config"]
    traces, model, rule = rebuild(config, [0])
    args = argparse.Namespace(**config)
    predicted = simulate_mode("plain-router-p2", traces[0], model, rule, args).completion_s

    def draw(policy):
        return simulate(traces[0], policy, model, config["instances"], config["max_tokens"], admission=rule,
                        plain=True, arrival_s=client_arrivals(traces[0])).completion_s

    draws = [draw(BlindPowerOfTwoPolicy(seed=d)) for d in range(RANDOM_DRAWS)]
    assert predicted == pytest.approx(statistics.fmean(draws), rel=1e-9)
    assert min(draws) < predicted < max(draws)
    assert draw(make_policy("sample-power-of-two")) < predicted  # in-flight counts balance it better


def test_a_runs_recorded_random_placement_is_what_the_simulators_check_replays():
    """Where each repeat of ``plain-router-p2`` recorded where the router sent every request (the
    shims' rids), the check replays that draw; the mean of the draws stays beside it. A record that
    misses a request is not used."""
    import argparse
    import random

    from benchmarks.harness.simulate import rebuild, sim_check, simulate_mode
    from benchmarks.harness.workload import baseline_rid

    config = by_label()["emulated_h100_moonlight_seerload_x45"].load()["config"]
    traces, model, rule = rebuild(config, [0])
    args = argparse.Namespace(**{**config, "vary_trace": False, "seed": 0, "sim_acceptance": None})
    trace = traces[0]
    rng = random.Random(5)
    drawn = {baseline_rid(s.group_id, s.sample_index): rng.randrange(config["instances"]) for s in trace}
    piled = {rid: 0 for rid in drawn}  # every request on the first instance
    draws = simulate_mode("plain-router-p2", trace, model, rule, args).completion_s
    one = simulate_mode("plain-router-p2", trace, model, rule, args, placement=drawn).completion_s
    assert simulate_mode("plain-router-p2", trace, model, rule, args, placement=piled).completion_s > 2 * draws
    assert one != draws

    def results(*records):
        return {"plain-router-p2": {"completion_s": 100.0, "tail_s": 10.0, "retractions": 0,
                                    "repeats": [{"placement": r} for r in records]}}
    check = sim_check(traces, model, rule, args, results(drawn, piled))["plain-router-p2"]
    assert check["placement"] == "recorded" and check["predicted_unrecorded_s"] == pytest.approx(draws, rel=1e-9)
    assert check["predicted_per_repeat_s"][0] == pytest.approx(one, rel=1e-9)
    assert check["predicted_per_repeat_s"][1] > 2 * draws
    partial = dict(list(drawn.items())[1:])
    check = sim_check(traces, model, rule, args, results(partial))["plain-router-p2"]
    assert "placement" not in check and check["predicted_s"] == pytest.approx(draws, rel=1e-9)


def test_a_recorded_cache_aware_placement_is_replayed_with_each_instances_order():
    """``plain-router`` (cache_aware) is decided by the order the burst reaches the router, which the
    client does not fix: a run's record is replayed, where each request went and in the order each
    instance got it; the model's own placement stays beside as the prediction without the record."""
    import argparse

    from benchmarks.harness.simulate import recorded_arrivals, rebuild, sim_check, simulate_mode
    from benchmarks.harness.workload import baseline_rid, parse_baseline_rid

    config = by_label()["emulated_h100_moonlight_seerload_x45"].load()["config"]
    traces, model, rule = rebuild(config, [0])
    args = argparse.Namespace(**{**config, "vary_trace": False, "seed": 0, "sim_acceptance": None})
    trace, n = traces[0], config["instances"]
    assert parse_baseline_rid(baseline_rid(12, 3)) == (12, 3)
    # whole groups in turn, each instance getting its groups last first
    record = {}
    for s in sorted(trace, key=lambda s: (-s.group_id, s.sample_index)):
        record[baseline_rid(s.group_id, s.sample_index)] = s.group_id % n
    arrivals = recorded_arrivals(record, n)
    for instance in range(n):
        order = [parse_baseline_rid(r) for r, i in record.items() if i == instance]
        assert [arrivals[k] for k in order] == sorted(arrivals[k] for k in order)
        assert order[0][0] > order[-1][0] and arrivals[order[0]] == 0.0
    model_s = simulate_mode("plain-router", trace, model, rule, args).completion_s
    whole = simulate_mode("plain-router", trace, model, rule, args, placement=record).completion_s
    piled = simulate_mode("plain-router", trace, model, rule, args,
                          placement=dict.fromkeys(record, 0)).completion_s
    assert piled > 2 * whole
    # where the shims timed each request, it arrives then: a burst that reached the instances 30 s late
    late = {rid: 30.0 + 0.001 * k for k, rid in enumerate(record)}
    assert recorded_arrivals(record, n, late)[parse_baseline_rid(next(iter(record)))] == 30.0
    delayed = simulate_mode("plain-router", trace, model, rule, args, placement=record, arrived=late).completion_s
    assert delayed == pytest.approx(whole + 30.0, abs=1.0)
    results = {"plain-router": {"completion_s": whole, "tail_s": 10.0, "retractions": 0,
                                "repeats": [{"placement": record}]}}
    check = sim_check(traces, model, rule, args, results)["plain-router"]
    assert check["placement"] == "recorded" and check["error"] == pytest.approx(0.0, abs=1e-9)
    assert check["predicted_unrecorded_s"] == pytest.approx(model_s, rel=1e-9)
    results["plain-router"]["repeats"][0]["arrivals"] = late
    check = sim_check(traces, model, rule, args, results)["plain-router"]
    assert check["predicted_s"] == pytest.approx(delayed, rel=1e-9)


def test_the_routers_shims_restore_custom_params_and_record_each_requests_rid():
    """Behind sglang-router each instance is reached through a ``ParamsShim``: it puts back a request's
    ``custom_params`` by rid and keeps the rids it passed on, the router's placement."""
    import threading

    import httpx
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from benchmarks.harness.sglang_router import ParamsShim
    from seer_sglang.launch.instances import free_port
    from seer_sglang.launch.waiting import wait_until

    seen = []

    async def generate(request):
        seen.append(await request.json())
        return JSONResponse({"ok": True})
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/generate", generate, methods=["POST"])]),
                                           host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 30, what="stand-in instance")
    shim = ParamsShim(f"http://127.0.0.1:{port}").start()
    try:
        shim.params = {"b0-1": {"target": 7}}
        for rid in ("b0-1", "b2-0"):
            r = httpx.post(f"{shim.url}/generate", json={"rid": rid, "sampling_params": {"temperature": 1.0}})
            assert r.status_code == 200 and r.json() == {"ok": True}
    finally:
        shim.stop()
        server.should_exit = True
        thread.join(30)
    assert list(shim.received) == ["b0-1", "b2-0"]
    assert shim.received["b0-1"] <= shim.received["b2-0"]
    assert seen[0]["sampling_params"] == {"temperature": 1.0, "custom_params": {"target": 7}}
    assert "custom_params" not in seen[1]["sampling_params"]


def test_each_mode_runs_on_the_seer_server_of_its_pool_drafter_and_budget():
    """``+sd`` verifies what the adaptive budget gives out, ``+sd-fixed`` every draft at every batch size
    (the GPU path's fixed verify width, at that path's draft tokens) with the same drafter; modes that
    agree share one server."""
    import argparse

    from benchmarks.rollout import server_config

    run = argparse.Namespace(draft="group-suffix", draft_tokens=32, draft_paths=16)
    assert server_config("context", run) == ("none", "none", "adaptive", "auto", 32, 16)
    assert server_config("context+sd", run) == ("none", "group-suffix", "adaptive", "auto", 32, 16)
    assert server_config("context+sd-fixed", run) == ("none", "group-suffix", "full", "auto", 8, 16)
    assert server_config("context+sd-bucketed", run) == ("none", "group-suffix", "adaptive", "bucketed", 8, 16)
    assert server_config("context+pool+sd-suffix", run) == ("file", "suffix", "adaptive", "auto", 32, 16)
    assert server_config("oracle+sd", run) == server_config("context+sd", run)
    assert server_config("context+d8+sd", run) == ("none", "group-suffix", "adaptive", "auto", 8, 16)
    assert server_config("context+p4+sd", run) == ("none", "group-suffix", "adaptive", "auto", 32, 4)


def test_a_run_that_did_not_record_its_draft_tokens_is_simulated_with_the_eight_it_ran():
    """Runs before the ragged verify's default of 32 draft tokens ran 8 in every layout: the simulator
    drafts as many as the run's instances did."""
    import argparse

    from benchmarks.harness.simulate import run_draft_tokens

    assert run_draft_tokens("context+sd", argparse.Namespace()) == 8
    assert run_draft_tokens("context+sd", argparse.Namespace(draft_tokens=32)) == 32
    assert run_draft_tokens("context+sd-fixed", argparse.Namespace(draft_tokens=32)) == 8
    assert run_draft_tokens("context+d16+sd", argparse.Namespace(draft_tokens=32)) == 16  # a mode's +d<n>


def test_a_run_that_did_not_record_its_draft_paths_is_simulated_with_the_four_it_ran():
    """Runs before the default of 16 draft paths drafted trees of 4; a run that recorded its paths is
    simulated with them, and a mode's ``+p<n>`` with its own."""
    import argparse

    from benchmarks.harness.simulate import run_draft_paths

    assert run_draft_paths("context+sd", argparse.Namespace()) == 4
    assert run_draft_paths("context+sd", argparse.Namespace(draft_paths=16)) == 16
    assert run_draft_paths("context+p8+sd", argparse.Namespace(draft_paths=16)) == 8


def test_a_modes_kv_headroom_reaches_the_simulated_policy_and_old_runs_keep_theirs():
    """``+h<x>`` runs the frontend with ``--kv-headroom x`` (``+c<n>``: chunks of n tokens); a run that did not record its headroom ran
    0.95, and a run that did is rechecked with its own."""
    import argparse

    from benchmarks.harness.simulate import mode_chunk, mode_headroom, mode_options, run_chunk, run_headroom

    assert mode_headroom("context+h1.2") == 1.2 and mode_headroom("context+h1.2+sd") == 1.2
    assert mode_headroom("context+sd-fixed") is None and mode_headroom("context") is None
    assert mode_options("context+h1.2+sd")[0] == "context"
    assert mode_chunk("context+c32+h1.2") == 32 and mode_chunk("context+sd") is None
    assert run_chunk("context+c32", argparse.Namespace(chunk_size=64)) == 32
    assert run_chunk("context", argparse.Namespace(chunk_size=64)) == 64
    assert run_headroom("context", argparse.Namespace()) == 0.95
    assert run_headroom("context", argparse.Namespace(kv_headroom=1.5)) == 1.5
    assert run_headroom("context+h1.2", argparse.Namespace(kv_headroom=1.5)) == 1.2
