"""The simulator's view of a benchmark run: its modes simulated on the run's own workloads and step model,
and a stored run's workloads rebuilt from its config. The benchmark predicts its run with these, and the
rechecks and bound studies rebuild a stored run the same way, so an unchanged simulator gives a stored
prediction back exactly.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from benchmarks.harness.baselines import canonical, is_plain
from benchmarks.harness.emulation import emulation_settings
from benchmarks.harness.manifest import moved, resolve
from benchmarks.harness.workload import baseline_rid, build_workload, parse_baseline_rid, prompt_tokenizer, workload_seeds, workload_shape
from seer_sglang.config import DRAFT, EmulationConfig
from seer_sglang.core.step_model import Admission, StepModel, profile_names
from seer_sglang.launch.emulation import admission
from seer_sglang.speculative.budget import draft_tokens_for, verify_layout
from seer_sglang.sim.workload import TraceSample, trace_group


def mode_options(mode: str) -> tuple[str, set[str]]:
    """``<policy>[+tail][+arrival][+pool][+h<x>][+c<n>][+d<n>][+p<n>][+sd|+sd-<drafter>]`` -> (policy, options); ``+tail`` sends each
    sample whole once the rollout is in its tail (``--whole-tail``); ``+arrival`` has the context policies
    serve equal length estimates in waiting order, not sibling by sibling across groups; ``+h<x>`` runs the
    frontend with ``--kv-headroom x``, ``+c<n>`` in chunks of ``n`` tokens, ``+d<n>`` drafts at most ``n``
    tokens a request and step, and ``+p<n>`` draft trees of at most ``n`` paths."""
    policy, *options = mode.split("+")
    return policy, set(options)


# Runs recorded before their config named the frontend's KV headroom ran this one
HEADROOM_BEFORE_RECORDED = 0.95


def mode_number(mode: str, letter: str, kind: type = int):
    """The value of a mode's ``+<letter><number>`` option (``+h1.2``, ``+c32``, ``+d16``), None without one."""
    for option in mode_options(mode)[1]:
        value = option[1:]
        if option[:1] == letter and (value.replace(".", "", 1) if kind is float else value).isdigit():
            return kind(value)
    return None


def mode_headroom(mode: str) -> float | None:
    """The ``+h<x>`` option of a mode: the frontend's ``--kv-headroom`` for it (None: the server's own)."""
    return mode_number(mode, "h", float)


def mode_chunk(mode: str) -> int | None:
    """The ``+c<n>`` option of a mode: its chunk size in place of the run's ``--chunk-size``."""
    return mode_number(mode, "c")


def run_chunk(mode: str, args) -> int | None:
    """The chunk size a mode's frontend runs with: its ``+c<n>`` option, else the run's ``--chunk-size``."""
    return mode_chunk(mode) or args.chunk_size


def run_headroom(mode: str, args) -> float:
    """The KV headroom a mode's frontend ran (or runs) with: its ``+h<x>`` option, else the run's own."""
    return mode_headroom(mode) or getattr(args, "kv_headroom", HEADROOM_BEFORE_RECORDED)


# Runs recorded before their config named the ragged verify's draft tokens ran this many in every layout
DRAFT_TOKENS_BEFORE_RECORDED = 8


def run_draft_tokens(mode: str, args) -> int:
    """The most draft tokens per request and step a ``+sd`` mode's instances run (``--draft-tokens``): its
    ``+d<n>``, else the default of the layout it verifies in (``budget.draft_tokens_for``), ``+sd-fixed``
    the full width's (the GPU path's), and the ragged one's as the run recorded it."""
    if given := mode_number(mode, "d"):
        return given
    layout = "full" if mode_drafter(mode) == FIXED_WIDTH else verify_layout(verify_layout_of(mode), cpu=True)
    if layout != "ragged":
        return draft_tokens_for(layout)
    return getattr(args, "draft_tokens", None) or DRAFT_TOKENS_BEFORE_RECORDED


def mode_drafter(mode: str) -> str | None:
    """The ``+sd...`` option of a mode, if it speculates."""
    return next((o for o in mode_options(mode)[1] if o.startswith("sd")), None)


# Runs recorded before their config named the instances' draft paths ran this many
DRAFT_PATHS_BEFORE_RECORDED = 4


def run_draft_paths(mode: str, args) -> int:
    """The most branches of a draft tree a mode's instances draft (``--draft-paths``): its ``+p<n>``, else
    the run's as it recorded them."""
    return mode_number(mode, "p") or getattr(args, "draft_paths", None) or DRAFT_PATHS_BEFORE_RECORDED


# ``+sd-fixed``: the group drafts of ``+sd`` with every draft verified at every batch size
# (``--draft-budget full``): the verify the GPU path runs today, at its fixed width (Seer's "No-Adapt")
FIXED_WIDTH = "sd-fixed"
# ``+sd-bucketed``: the group drafts and adaptive budget of ``+sd``, every request of a step padded to the
# step's bucket (``--verify-layout bucketed``): the shapes a GPU captures one graph per width for
BUCKETED = "sd-bucketed"
GROUP_DRAFTS = ("sd", FIXED_WIDTH, BUCKETED)  # the modes that draft from the group with the default drafter


def verify_layout_of(mode: str) -> str:
    """The verify layout a mode's instances run (``--verify-layout``; ``auto`` is the device's own)."""
    return "bucketed" if mode_drafter(mode) == BUCKETED else "auto"


def mode_speculation(mode: str, default_draft: str) -> tuple[str, str]:
    """(drafter, draft budget) of a mode's seer server: ``+sd`` the default drafter and budget,
    ``+sd-fixed`` the default drafter verifying every draft, ``+sd-bucketed`` the default drafter and
    budget on the bucketed verify (``verify_layout_of``), ``+sd-<drafter>`` another drafter; ("none",
    default budget) without speculation."""
    option = mode_drafter(mode)
    if option is None:
        return "none", DRAFT.budget
    if option == FIXED_WIDTH:
        return default_draft, "full"
    return (default_draft if option in GROUP_DRAFTS else option[3:]), DRAFT.budget


# Plain SGLang's client posts every request at once, and they reach the instances one after another
# in the order it sends them, about this far apart (``--emulate-step-log`` records each arrival,
# ``benchmarks.step_log`` prints them: the first 128 of 512 requests reached their queues within 0.10 s).
CLIENT_SEND_INTERVAL_S = 0.0008


def client_arrivals(trace: list[TraceSample]) -> dict[tuple[int, int], float]:
    """When each of plain SGLang's requests reaches its instance, from the start of the rollout: in the
    order ``run_baseline`` sends them, ``CLIENT_SEND_INTERVAL_S`` apart. Which requests share SGLang's
    first prefills decides which it retracts first, and so which instance ends the rollout."""
    return {(s.group_id, s.sample_index): i * CLIENT_SEND_INTERVAL_S for i, s in enumerate(trace)}


# How the context policies order samples of equal estimates in the runs this version measures: a run's
# config keeps it, and the simulator rechecks a run with the order the run had ("arrival" before).
CONTEXT_TIES = "spread"

# How the frontend prices moving a continuation in the runs this version measures: on emulated instances
# by their profile (``StepModel.migration_cost``); a run's config keeps it, and one without the key ran
# the fixed defaults (``MigrationCost()``).
MOVE_COST = "profile"


def run_migration(args, model: StepModel):
    """The move cost a run's frontend had: the instances' profile where the run says so and emulated, else
    None (the policy's fixed defaults)."""
    if getattr(args, "move_cost", "fixed") == "profile" and getattr(args, "emulate", None):
        return model.migration_cost()
    return None


# plain mode -> the simulator's model of how its requests are placed (``core.policy``): whole groups in
# turn, one request per sample in turn, or one per sample through sglang-router's cache_aware or
# power_of_two policy
SIM_PLACEMENT = {"plain-group": "round-robin", "plain-sample": "sample-round-robin",
                 "plain-router": "sample-cache-aware", "plain-router-p2": "sample-power-of-two-blind"}
# A placement that is random (sglang-router's power_of_two, whose loads all read 0 in front of SGLang
# 0.5.23: ``core.policy.BlindPowerOfTwoPolicy``) is predicted by the mean of this many draws: a run is one
# draw, and the draws of one workload end up to 15% apart.
RANDOM_PLACEMENTS = {"sample-power-of-two-blind"}
RANDOM_DRAWS = 8
# The placements sglang-router decides. A run records them (its shims keep each instance's requests in the
# order they came), and its check replays that record: where each request went and in what order each
# instance got it. The client sends the rollout's burst concurrently, so the router sees the requests in an
# order no client fixes; cache_aware's choice for a group's first request depends on that order (its miss
# rule is the least-loaded instance), and the three held-out runs that recorded it each placed the groups
# otherwise than the model's order does. What the check then holds the simulator to is its step model and
# admission, not a draw of the router's order; the prediction without the record stays beside it.
ROUTED_PLACEMENTS = {"sample-cache-aware", *RANDOM_PLACEMENTS}


def recorded_placement(placement: dict[str, int]):
    """A router's placement as one run recorded it (``placement``: the run's ``baseline_rid`` -> the
    instance the router sent it to)."""
    from seer_sglang.core.policy import PerSamplePolicy

    class RecordedPlacement(PerSamplePolicy):
        name = "sample-recorded"

        def pick(self, instances, sample):
            rid = baseline_rid(trace_group(sample.group_id), sample.index)
            if rid not in placement:
                raise KeyError(f"the recorded placement has no request {rid}")
            return instances[placement[rid]]

    return RecordedPlacement()


def recorded_arrivals(placement: dict[str, int], instances: int,
                      arrived: dict[str, float] | None = None) -> dict[tuple[int, int], float]:
    """When each request of a recorded placement reaches its instance: as the shims timed it (``arrived``,
    seconds from the rollout's start) where the run kept that, else in the order that instance's shim
    received them (the record keeps it), the client's spacing between two requests of the burst times the
    instances, as the burst spreads over them."""
    if arrived:
        return {parse_baseline_rid(rid): max(0.0, arrived[rid]) for rid in placement}
    seen = dict.fromkeys(range(instances), 0)
    out = {}
    for rid, instance in placement.items():
        out[parse_baseline_rid(rid)] = seen[instance] * CLIENT_SEND_INTERVAL_S * instances
        seen[instance] += 1
    return out


def simulate_mode(mode: str, trace: list[TraceSample], model: StepModel, rule: Admission, args, spec=None,
                  prompts: list[list[int]] | None = None, placement: dict[str, int] | None = None,
                  arrived: dict[str, float] | None = None):
    """One simulated run of a benchmark mode on ``trace`` (a plain mode: plain SGLang fed as its trainer
    feeds it, its requests arriving as ``client_arrivals`` has them); ``spec``, the acceptance of a
    ``+sd`` mode, drafts from the group unless the mode says ``+sd-suffix``. A random placement runs as
    ``placement`` records it where given, else as the mean of ``RANDOM_DRAWS`` draws."""
    from seer_sglang.core.policy import BlindPowerOfTwoPolicy, make_policy
    from seer_sglang.sim.simulator import simulate

    name, options = mode_options(mode)
    plain = is_plain(mode)
    placer = SIM_PLACEMENT[canonical(mode)] if plain else name
    replayed = placement is not None and placer in ROUTED_PLACEMENTS

    def policy(draw: int = 0):
        if replayed:
            return recorded_placement(placement)
        if placer == BlindPowerOfTwoPolicy.name:
            return BlindPowerOfTwoPolicy(seed=draw)
        return make_policy(placer, chunk_size=run_chunk(mode, args), whole_tail="tail" in options,
                           kv_headroom=run_headroom(mode, args), migration=run_migration(args, model),
                           spread_ties=getattr(args, "context_ties", CONTEXT_TIES) == "spread"
                           and "arrival" not in options)
    if spec is not None:
        drafter = mode_drafter(mode)
        # a run's config says ``budget_kv_read`` since the budget counts the KV read; older runs ran without
        spec = dataclasses.replace(spec, grouped=drafter in GROUP_DRAFTS, gamma_max=run_draft_tokens(mode, args),
                                   draft_paths=run_draft_paths(mode, args),
                                   budget_name="full" if drafter == FIXED_WIDTH else DRAFT.budget,
                                   budget_kv_read=getattr(args, "budget_kv_read", False),
                                   verify_layout=verify_layout_of(mode))
    arrivals = ((recorded_arrivals(placement, args.instances, arrived) if replayed else client_arrivals(trace))
                if plain else None)

    def run(draw: int = 0):
        return simulate(trace, policy(draw), model, args.instances, args.max_tokens, spec=spec, admission=rule,
                        plain=plain, arrival_s=arrivals, prompts=dict(enumerate(prompts)) if prompts else None)

    if placer not in RANDOM_PLACEMENTS or replayed:
        return run()
    return mean_of_draws([run(d) for d in range(RANDOM_DRAWS)])


def mean_of_draws(draws: list):
    """One result for a random placement: the draw nearest the mean completion time, with the mean
    completion, tail and throughput of all draws (its per-instance figures stay that draw's own)."""
    completion = statistics.fmean(r.completion_s for r in draws)
    nearest = min(draws, key=lambda r: abs(r.completion_s - completion))
    return dataclasses.replace(nearest, completion_s=completion, tail_s=statistics.fmean(r.tail_s for r in draws),
                               throughput_tok_s=nearest.total_tokens / completion,
                               retractions=round(statistics.fmean(r.retractions for r in draws)))


def run_acceptance(args, seed: int):
    """The simulator's acceptance for a run's ``+sd`` modes (``--sim-acceptance``), per sample where the
    run replayed the text that file was measured on (``SpecModel.from_replay``)."""
    from seer_sglang.sim.spec_model import SpecModel

    return SpecModel.from_replay(resolve(args.sim_acceptance), seed=seed, text=moved(getattr(args, "replay", None)))


def predict(traces: list[list[TraceSample]], model: StepModel, rule: Admission, args, modes,
            prompts: list[list[list[int]]] | None = None,
            placements: dict[str, list[dict[str, int]]] | None = None) -> dict:
    """The simulator's runs of ``modes`` on a run's repeats (each repeat's workload simulated once), on the
    step model the instances ran (emulated) or were fitted to (CPU). A ``+sd`` mode is left out without
    acceptance measured on the run's text (``--sim-acceptance``): there is nothing to hold it to. The
    plain-router modes are simulated with ``SIM_PLACEMENT``'s model of sglang-router's placement, which
    routes by the prompts' tokens: ``prompts`` (each trace's, by group; default the ``workload_prompts``
    a rebuilt run's arguments carry) gives them. ``placements`` (mode -> each repeat's recorded placement)
    has a router's mode replay each repeat's own record."""
    prompts = prompts or getattr(args, "workload_prompts", None)
    seeds = workload_seeds(args) if getattr(args, "vary_trace", False) else [args.seed] * len(traces)
    measured = {seed: run_acceptance(args, seed) for seed in set(seeds)} if args.sim_acceptance else None
    out = {}
    for mode in modes:
        drafter = mode_drafter(mode)
        if drafter is not None and (measured is None or drafter not in (*GROUP_DRAFTS, "sd-suffix")):
            continue
        # The step model's pool term is the profile's; "+pool" modes are simulated as recompute.
        recorded = (placements or {}).get(mode)
        if recorded:  # each repeat its own draw (repeats of one workload: that workload each time)
            out[mode] = []
            for r, record in enumerate(recorded):
                w = r % len(traces)
                out[mode].append(simulate_mode(mode, traces[w], model, rule, args,
                                               measured[seeds[w]] if drafter else None,
                                               prompts[w] if prompts else None, record["placement"],
                                               record.get("arrivals")))
            continue
        sims = {}
        for r, (trace, seed) in enumerate(zip(traces, seeds)):
            if id(trace) not in sims:
                sims[id(trace)] = simulate_mode(mode, trace, model, rule, args, measured[seed] if drafter else None,
                                                prompts[r] if prompts else None)
        out[mode] = [sims[id(t)] for t in traces]
    return out


def recorded_placements(results: dict, traces: list[list[TraceSample]]) -> dict[str, list[dict]]:
    """The modes placed by the router whose every repeat recorded where each of its requests went
    (``placement``, from the router's shims), with those records: each repeat's ``placement`` and, where
    the run timed them, its ``arrivals`` (rid -> seconds from the rollout's start)."""
    out = {}
    for mode, r in results.items():
        if not is_plain(mode) or SIM_PLACEMENT.get(canonical(mode)) not in ROUTED_PLACEMENTS:
            continue
        records = [{"placement": rep.get("placement"), "arrivals": rep.get("arrivals")} for rep in r.get("repeats", [])]
        if records and len(traces) in (1, len(records)) and \
                all(p["placement"] and len(p["placement"]) == len(traces[i % len(traces)]) for i, p in enumerate(records)):
            out[mode] = records
    return out


def sim_check(traces: list[list[TraceSample]], model: StepModel, rule: Admission, args, results: dict,
              prompts: list[list[list[int]]] | None = None, emulation: dict | None = None) -> dict:
    """The simulator against the mean of the real runs: ``error`` is signed and relative
    (predicted / real - 1). With the emulation's counters of each mode's repeats (``emulation``, mode ->
    one dict per repeat) ``steps`` puts the simulated steps beside the ones the instances ran, so a
    miss shows whether the simulator ran fewer or cheaper steps or idled its instances more."""
    out = {}
    placements = recorded_placements(results, traces)
    # what the simulator predicts without the record (the model's placement; a random one's mean of draws),
    # beside the check of the run's own record
    unrecorded = predict(traces, model, rule, args, list(placements), prompts) if placements else {}
    for mode, runs in predict(traces, model, rule, args, results, prompts, placements).items():
        real = results[mode]
        predicted = statistics.fmean(r.completion_s for r in runs)
        out[mode] = {"predicted_s": predicted, "real_s": real["completion_s"],
                     "error": predicted / real["completion_s"] - 1.0,
                     "predicted_tail_s": statistics.fmean(r.tail_s for r in runs), "real_tail_s": real["tail_s"],
                     "predicted_retractions": statistics.fmean(r.retractions for r in runs),
                     "real_retractions": real["retractions"],
                     "predicted_per_repeat_s": [r.completion_s for r in runs]}
        if mode in unrecorded:
            out[mode]["placement"] = "recorded"
            out[mode]["predicted_unrecorded_s"] = statistics.fmean(r.completion_s for r in unrecorded[mode])
        counters = (emulation or {}).get(mode)
        if counters:
            out[mode]["steps"] = step_split(runs, counters)
    return out


def step_split(runs: list, counters: list[dict]) -> dict:
    """A mode's steps, all instances together, mean per repeat: prefill batches and decode (or verify)
    steps with their modelled time, as simulated (``SimResult``s) and as the emulated instances ran them
    (their ``seer_emulation`` counters, which price every step with the same profile)."""
    def mean(values) -> float:
        return statistics.fmean(values) if values else 0.0

    def emulated(kinds: dict, names: tuple[str, ...], key: str) -> float:
        return sum(kinds.get(k, {}).get(key, 0) for k in names)

    steps = ("decode", "verify")
    return {"predicted": {"prefill_steps": mean([sum(r.prefill_steps) for r in runs]),
                          "prefill_s": mean([sum(r.prefill_s) for r in runs]),
                          "decode_steps": mean([sum(r.decode_steps) for r in runs]),
                          "decode_s": mean([sum(r.busy_s) - sum(r.prefill_s) for r in runs])},
            "real": {"prefill_steps": mean([emulated(c.get("kinds", {}), ("prefill",), "steps") for c in counters]),
                     "prefill_s": mean([emulated(c.get("kinds", {}), ("prefill",), "model_s") for c in counters]),
                     "decode_steps": mean([emulated(c.get("kinds", {}), steps, "steps") for c in counters]),
                     "decode_s": mean([emulated(c.get("kinds", {}), steps, "model_s") for c in counters])}}


def rebuild(config: dict, seeds: list[int], prompts: list | None = None):
    """The traces of ``seeds``, the step model, the KV capacity and the admission rule of a
    ``benchmarks.rollout --emulate`` run; each workload's prompts are appended to ``prompts`` when given."""
    args = argparse.Namespace(**config)
    spec = workload_shape(args)
    tokenizer = prompt_tokenizer(args)
    works = [build_workload(argparse.Namespace(**{**config, "seed": s}), tokenizer, spec) for s in seeds]
    traces = [w.trace for w in works]
    if prompts is not None:
        prompts.extend(w.prompts for w in works)
    if args.emulate and args.emulate not in profile_names():  # a profile file, where it is stored now
        args.emulate = str(resolve(args.emulate))
    emulated, length_scale = emulation_settings(args)
    if emulated is None:
        raise SystemExit("--from must be an emulated run (benchmarks.rollout --emulate)")
    model = dataclasses.replace(emulated, capacity_tokens=args.kv_tokens,
                                request_overhead_s=config["calibration"]["request_overhead_s"])
    rule = admission(EmulationConfig(args.emulate, args.emulate_time_scale, length_scale))
    return traces, model, rule


def rebuilt(run: dict):
    """(each repeat's trace, step model, admission rule, the run's arguments) of a stored run; the
    arguments carry each repeat's prompts (``workload_prompts``) for the simulator's load balancers."""
    config = run["config"]
    args = argparse.Namespace(**config)
    prompts: list = []
    traces, model, rule = rebuild(config, workload_seeds(args), prompts)
    repeats = range(config["repeats"])
    args.workload_prompts = [prompts[r % len(prompts)] for r in repeats]
    return [traces[r % len(traces)] for r in repeats], model, rule, args


def recheck(run: dict) -> dict:
    """The run's ``sim_check`` from the current simulator."""
    traces, model, rule, args = rebuilt(run)
    return sim_check(traces, model, rule, args, run["modes"], emulation=run.get("emulation", {}).get("per_mode"))


def rebounds(run: dict) -> dict:
    """The simulator's bound policies (``targets.bound_modes``) on a stored run's workloads now, as the
    run's ``targets.bounds`` were computed with it; {} for a run without a ``context`` mode."""
    from benchmarks.harness.targets import bound_modes, bounds

    extra = bound_modes(run["modes"])
    if not extra:
        return {}
    traces, model, rule, args = rebuilt(run)
    return bounds(predict(traces, model, rule, args, extra))
