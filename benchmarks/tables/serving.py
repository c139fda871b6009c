"""Tables of the serving benchmarks: KV transfers and the pool, load, multi-turn latency, soak, SLOs."""

from __future__ import annotations

import statistics


from .format import Results, fint, fnum, fratio, fsec, source, spread, table

def transfer_table(results: Results, stems: list[str]) -> str:
    d = results[stems[0]]
    cfg = d["config"]
    names = {"off": "off (pool transfers never yield)", "on": f"on (wait at most {cfg['starvation_steps']} steps)"}
    rows = [[names.get(k, k), f"{fint(t['itl_during_ms_p50'])} ms", f"{fint(t['itl_during_ms_p99'])} ms",
             f"{fint(t['itl_during_ms_max'])} ms", fsec(t["migration_s_mean"]),
             f"{fint(t['tokens_from_pool'])} / {fint(t['context_tokens'])}"] for k, t in d["trials"].items()]
    caption = (f"CPU-measured ({cfg['machine'].removesuffix(', CPU')}), one run each: model `{cfg['model']}` ({cfg['dtype']}), "
               f"{cfg['contexts']} continuations of {cfg['context_tokens']:,} tokens load from the file pool into "
               f"an instance decoding {cfg['decode_batch']} requests; p99 with the gate vs without: "
               f"{fratio(d['ratio_itl_p99_on_vs_off'])}. Source: {source(stems)}.")
    return "\n".join(table(["transfer gate", "decode inter-token p50", "p99", "max", "continuation time (mean)",
                            "tokens from pool / context"], rows) + ["", caption])


def kv_pool_table(results: Results, stems: list[str]) -> str:
    """Moving a long context by pool load vs by recompute, and a rollout with one instance killed."""
    rows = []
    for stem in stems:
        d = results[stem]
        load, recompute = d["move_cost"]["context+pool"], d["move_cost"]["context"]
        for n in sorted(load, key=int):
            rows.append([f"`{d['model']}`", f"{int(n):,}", fsec(load[n]["seconds"]["mean"], 3),
                         fint(load[n]["pool_tokens"]["mean"]), fsec(recompute[n]["seconds"]["mean"], 3),
                         fratio(load[n]["seconds"]["mean"] / recompute[n]["seconds"]["mean"])])
    moves = table(["model", "context tokens", "move by pool load", "tokens loaded", "move by recompute",
                   "load / recompute"], rows)
    rows = []
    for stem in stems:
        d = results[stem]
        for mode, r in d["rollout"].items():
            k = r["killed"]
            moved = [run["moved"] for run in k["moved"]]
            rows.append([f"`{d['model']}`", f"`{mode}`",
                         f"{fsec(k['seconds']['mean'])} ± {fnum(k['seconds']['stdev'])}",
                         fint(statistics.fmean(m["context"] for m in moved)),
                         fint(statistics.fmean(m["pool"] for m in moved)),
                         fint(statistics.fmean(m["recomputed"] for m in moved)),
                         "yes" if k["identical_tokens"] else "NO", fint(r["undisturbed"]["kv"]["recomputed"])])
    kills = table(["model", "mode", "completion, one instance killed", "context of moved samples",
                   "loaded from pool", "recomputed", "tokens as undisturbed", "recomputed when nothing moves"], rows)
    d = results[stems[0]]
    a = d["args"]
    caption = (f"{d['device']}-measured, 2 instances, {a['dtype']}. Moves: a fresh context generated on "
               f"one instance, its 1-token continuation timed on the other (mean of {a['repeats']}). "
               f"Rollout: {a['prompts']} prompts x 1, max {a['max_tokens']:,} tokens, chunk {a['chunk_size']}, "
               f"one instance killed once {a['kill_at']:.0%} of the tokens are generated, {a['repeats']} repeats "
               f"per mode in random order (mean ± standard deviation); the moved samples' figures are per rollout. "
               f"Source: {source(stems)}.")
    return "\n".join(moves + [""] + kills + ["", caption])


def default_pool_table(results: Results, stems: list[str]) -> str:
    """The default pool (``--kv-pool auto``) against ``--kv-pool none`` when nothing moves."""
    rows = []
    for stem in stems:
        d = results[stem]
        for mode, m in d["modes"].items():
            pool = m["pool"]
            rows.append([f"`{d['model']}`", f"`{mode}`",
                         f"{pool['kind']}" + (f", page {pool['page_size']}" if pool.get("page_size") else ""),
                         f"{fsec(m['seconds']['mean'])} ± {fnum(m['seconds']['stdev'])}",
                         fint(m["recomputed"]["mean"]), "yes" if m["identical_tokens"] else "NO"])
        r = d["ratios"]
        rows.append([f"`{d['model']}`", "default / none", "", fratio(r["seconds_default_over_none"]),
                     fratio(r["recomputed_default_over_none"]), ""])
    d = results[stems[0]]
    a = d["args"]
    caption = (f"{d['device']}-measured, 2 instances, {a['dtype']}, {a['prompts']} prompts of "
               f"{a['prompt_tokens'].replace(',', '-')} tokens x {a['n']} samples, max {a['max_tokens']} tokens, "
               f"one chunk per sample (nothing moves), {a['repeats']} repeats per mode in random order "
               f"(mean ± standard deviation). Source: {source(stems)}.")
    return "\n".join(table(["model", "mode", "pool", "completion", "tokens recomputed", "tokens as none"], rows)
                     + ["", caption])


def _span(values: list[float]) -> str:
    return "-" if not values else f"{min(values):.1f}–{max(values):.1f} s"


def load_table(results: Results, stem: str) -> str:
    """``benchmarks.load``: the frontend's added latency, the load it held, its memory and the account."""
    d = results[stem]
    lat, soak, c = d["latency"], d["soak"], d["config"]
    t = lat["targets"]
    names = {"plain": "plain SGLang", "instance": "seer's instance, direct", "frontend": "through the frontend"}
    rows = [[names[k], f"{fnum(v['requests_per_s'])} req/s", f"{fint(v['p50_ms'])} ms", f"{fint(v['p99_ms'])} ms"]
            for k, v in t.items()]
    for base in ("plain", "instance"):
        added = lat[f"added_vs_{base}"]
        rows.append([f"frontend added, vs {names[base]}", "", f"{added['p50_ms']:+,.0f} ms",
                     f"{added['p99_ms']:+,.0f} ms"])
    latency = table(["target", "held", "p50", "p99"], rows)
    o, m = soak["outcomes"], soak["memory_mb"]
    rows = [["requests held", f"{fint(soak['requests'])} in {fsec(soak['wall_s'], 0)} of rounds "
             f"({fnum(soak['requests_per_s'])}/s), {fint(sum(soak['samples'].values()))} samples "
             f"({fnum(soak['samples_per_s'])}/s)"],
            ["outcomes", ", ".join(f"{k} {fint(v)}" for k, v in sorted(o.items()))],
            ["lost / duplicated / missing / cut short", f"{soak['lost']} / {soak['duplicated']} / {soak['missing']} / "
             f"{soak['wrong_length']} (server errors: {soak['server_errors']})"],
            ["pause / continue", f"{soak['pauses']} times, {fsec(soak['paused_s'])} in all; the pause call took "
             + _span([c["pause_s"] for c in soak["pause_calls"]]) + ", the continue call "
             + _span([c["continue_s"] for c in soak["pause_calls"]])],
            ["drained after the clients stopped", "-" if soak["drained_s"] is None else fsec(soak["drained_s"])],
            ["frontend memory (RSS)", f"{fint(m['start'])} MiB at start, {fint(m['peak'])} peak; after each round: "
             + ", ".join(f"{fint(x)}" for x in m["after_each_round"]) + " MiB"],
            ["frontend processes / file descriptors", f"{soak['before']['processes']} / {soak['before']['fds']} before; "
             "after each round: " + ", ".join(f"{r['footprint']['processes']} / {r['footprint']['fds']}"
                                              for r in soak["rounds"])]]
    checks = ", ".join(f"{k.replace('_', ' ')}: {'yes' if v else 'NO'}" for k, v in d["checks"].items())
    caption = (f"{d['hardware']}, {d['cpus']} cores shared by the instance(s), the frontend and the load generator; "
               f"model `{c['model']}`, one instance. Latency: {c['latency_clients']} closed-loop clients, chat "
               f"completions of {c['latency_tokens']} tokens, {c['latency_s']:.0f} s per run, {c['repeats']} "
               f"repeats per target in random order (means). Soak: {fint(c['clients'])} concurrent clients for "
               f"{c['soak_rounds']} rounds of {c['soak_s']:.0f} s (each drained), samples of {c['max_tokens']} tokens, {c['drop_share']:.0%} of streams dropped "
               f"by their client, aborts by rid and by group on {c['long_tokens']}-token requests. "
               f"Checks: {checks}. Source: {source([stem])}.")
    return "\n".join(latency + [""] + table(["soak", ""], rows) + ["", caption])


def multiturn_table(results: Results, stems: list[str]) -> str:
    """``benchmarks.multiturn``: per-turn latency of an agent loop through ``/generate``, one table a run."""
    return "\n\n".join(_multiturn_run(results, stem) for stem in stems)


def _multiturn_run(results: Results, stem: str) -> str:
    d = results[stem]
    c, m = d["config"], d["modes"]
    names = {"plain": "plain SGLang, called directly", "seer": "seer_sglang, turns name their trajectory",
             "seer-no-session": "seer_sglang, no trajectory named",
             "seer-instance": "seer_sglang's instance, past the frontend"}
    paired = c.get("interleaved", False)  # modes sent turn by turn, back to back: each turn has a pair
    rows = [[names[mode], f"{fnum(m[mode]['p50_ms'])} ms", f"{fnum(m[mode]['p90_ms'])} ms",
             *([f"{m[mode]['paired_over_plain_p50_ms']:+.1f} ms"] if paired else []),
             " / ".join(fnum(x) for x in m[mode]["per_repeat_p50_ms"]),
             f"{m[mode]['cached_share_later_turns']:.0%}",
             "-" if m[mode]["turns_differing_from_plain"] is None else str(m[mode]["turns_differing_from_plain"])]
            for mode in ("plain", "seer", "seer-no-session", "seer-instance")]
    seer_args = c.get("seer_args") or ""
    caption = (f"CPU (measured, not a GPU figure): model `{c['model']}`, float32; seer with {c['instances']} "
               f"instances{f' and `{seer_args}`' if seer_args else ' as launched by default (speculation on)'}, plain SGLang one instance, the cores split among them; {c['trajectories']} agent "
               f"trajectories x {c['turns']} turns of {c['max_tokens']} tokens, one agent at a time, each turn's "
               f"prompt the last one plus its answer and {c['observation_len']} new tokens (the first "
               f"{c['first_len']}); {c['repeats']} repeats after a warm-up, "
               f"{'every turn sent in all modes back to back in a random order (paired)' if paired else 'the modes in a random order per repeat'}. seer's p50 is "
               f"{d['seer_over_plain_p50_ms']:+.1f} ms from plain SGLang's, of which the frontend "
               f"{d['frontend_p50_ms']:+.1f} ms (seer against its own instance called directly). "
               f"Source: {source([stem])}.")
    return "\n".join(table(["per-turn latency", "p50", "p90", *(["paired over plain (median)"] if paired else []),
                            "p50 per repeat (ms)", "prompt cached (turns 2+)", "turns not plain's tokens"], rows)
                      + ["", caption])


def soak_table(results: Results, stem: str) -> str:
    """``benchmarks.soak``: rollout rounds with chunks, moves, speculation and the pool; the account."""
    d = results[stem]
    c, t, slopes, p = d["config"], d["totals"], d["rss_slope"], d["pause_ms"]
    rounds = d["rounds"]
    first, last = rounds[0], rounds[-1]
    rows = [["rounds x samples", f"{len(rounds)} x {d['samples_per_round']} "
             f"({fint(len(rounds) * d['samples_per_round'])} samples, {fint(t['chunks'])} chunks, "
             f"{fint(t['moved_chunks'])} moved between instances)"],
            ["lost / duplicated / changed samples", f"{t['lost']} / {t['duplicated']} / {t['changed']} "
             f"({t['changed_tokens']} tokens differ from the first round)"],
            ["frontend RSS", f"{fint(first['frontend_rss_mb'])} -> {fint(last['frontend_rss_mb'])} MiB, slope "
             f"{slopes['frontend_mb_per_round']:+.3f} MiB/round"],
            ["instance RSS", "; ".join(f"{fint(a)} -> {fint(b)} MiB, slope {sl:+.3f} MiB/round" for a, b, sl in
                                       zip(first["instance_rss_mb"], last["instance_rss_mb"],
                                           slopes["instances_mb_per_round"]))],
            ["/pause_generation under load", f"p50 {fint(p['p50'])} ms, p99 {fint(p['p99'])} ms, max {fint(p['max'])} ms"]]
    checks = ", ".join(f"{k.replace('_', ' ')}: {'yes' if v else 'NO'}" for k, v in d["checks"].items())
    caption = (f"CPU (measured, not a GPU figure): model `{c['model']}`, 2 instances, float32, chunks of "
               f"{c['chunk_size']} tokens, file pool, `--draft group-suffix`; each round a greedy and a seeded "
               f"temperature-1 rollout of {c['prompts']} prompts x {c['n']} samples ({c['max_tokens']} tokens at "
               f"most) at once, paused and continued mid-way; slopes fitted after the first tenth of the rounds. "
               f"Checks: {checks}. Source: {source([stem])}.")
    return "\n".join(table(["soak", ""], rows) + ["", caption])


def slo_table(results: Results, stem: str) -> str:
    """``benchmarks.slo``: SLO attainment, refusals and the rollout's throughput, seer vs plain SGLang."""
    d = results[stem]
    c, modes = d["config"], d["modes"]
    names = {"plain": "plain SGLang, priority scheduling", "seer": "seer (credit batching, VBS admission)"}
    classes = list(d["slo_classes"])
    pct = lambda x: "-" if x is None else f"{x:.0%}"  # noqa: E731
    rows = [[names[m], pct(v["slo_attainment"]), *(pct(v["per_class"][k]["slo_attainment"]) for k in classes),
             fint(v["admitted"]), fint(v["rejected"]), spread(v["goodput_req_s"]["runs"], lambda x: f"{x:.2f}"),
             spread(v["rollout_throughput_tok_s"]["runs"], fint)]
            for m, v in modes.items()]
    header = ["mode", "SLO attainment", *(f"{k} ({d['slo_classes'][k]['tpot_ms']:.0f} ms TPOT)" for k in classes),
              "admitted", "refused (429)", "goodput (req/s)", "rollout tok/s"]
    goal = ", ".join(f"{k.replace('_', ' ')}: {'yes' if v else 'NO'}" for k, v in d["goal"].items())
    lengths = (f"of {c['max_tokens']} tokens" if not c.get("workload") else
               f"with {c['workload']}'s length shape up to {c['max_tokens']} tokens")
    timing = (f", times stretched x{c['emulate_time_scale']:g}" if c.get("emulate") else "")
    overruns = [v.get("emulation_overrun_share") for v in modes.values() if v.get("emulation_overrun_share") is not None]
    if overruns:
        timing += (f" (overrun steps: at most {max(overruns):.1%} in a run"
                   f"{'' if d.get('valid', True) else ', above 5%: the host, not the profile, set the times'})")
    sim = d.get("sim_check")
    predicted = ("" if not sim else
                 f" The simulator, on the same profile, trace and arrivals, predicts attainment "
                 f"{pct(sim['plain']['slo_attainment'])} (plain) and {pct(sim['seer']['slo_attainment'])} (seer), "
                 f"rollout throughput {fratio(sim['ratios']['rollout_throughput'])}.")
    caption = (f"{d['hardware']}{timing}; model `{c['model']}`, {c['instances']} instances. A rollout of {c['prompts']} x "
               f"{c['group_size']} samples {lengths}; beside it interactive requests of "
               f"{c['interactive_tokens']} tokens, strict and loose in turn (TTFT SLO {c['ttft_ms']:.0f} ms), "
               f"arriving at {', '.join(f'{r:g}' for r in c['rates'])} req/s for {c['phase_s']:.0f} s each. "
               f"Seer's `--slo-headroom` {c['slo_headroom']:g}. "
               f"{c['repeats']} runs per mode in random order, the same arrival schedule for both modes in a "
               f"repeat{'' if c.get('paired_schedules') else ' (each run its own schedule in this file)'} "
               f"(spread: min–max). SLO attainment: share of admitted "
               f"requests that met both SLOs. Rollout throughput seer / plain: {fratio(d['ratios']['rollout_throughput'])}. "
               f"Goal: {goal}.{predicted} Source: {source([stem])}.")
    return "\n".join(table(header, rows) + ["", caption])


def slo_frontier_table(results: Results, stem: str) -> str:
    """The simulator's sweep of the strict TPOT SLO in a ``benchmarks.slo --emulate`` result."""
    d = results[stem]
    pct = lambda x: "-" if x is None else f"{x:.0%}"  # noqa: E731
    rows = [[f"{r['strict_beside_factor']:g}x", pct(r["plain_attainment"]), pct(r["seer_attainment"]),
             fint(r["seer_rejected"]), fratio(r["rollout_throughput_ratio"])] for r in d["sim_check"]["frontier"]]
    header = ["strict TPOT SLO (x TPOT beside the rollout)", "plain attainment", "seer attainment",
              "seer refused", "rollout throughput seer / plain"]
    caption = (f"SIMULATED on the profile of {d['hardware']}: the measured run's trace and arrival schedule, "
               f"the loose class at {d['config']['loose_factor']:g}x the strict one. Source: {source([stem])}.")
    return "\n".join(table(header, rows) + ["", caption])


def slo_load_table(results: Results, stem: str) -> str:
    """The simulator's sweep of the interactive load in a ``benchmarks.slo --emulate`` result."""
    d = results[stem]
    pct = lambda x: "-" if x is None else f"{x:.0%}"  # noqa: E731
    rows = [[f"{r['load_scale']:g}x ({', '.join(f'{x:g}' for x in r['rates'])})", fint(r["requests"]),
             pct(r["plain_attainment"]), pct(r["seer_attainment"]), fint(r["seer_rejected"]),
             pct(r["best_effort_deferred_share"]), fratio(r["rollout_throughput_ratio"])]
            for r in d["sim_check"]["load_frontier"]]
    header = ["interactive load (req/s per phase)", "SLO requests", "plain attainment", "seer attainment",
              "seer refused", "rollout rows sitting out SLO steps", "rollout throughput seer / plain"]
    caption = (f"SIMULATED on the profile of {d['hardware']}: the measured run's trace, SLO classes and arrival "
               f"schedules with every rate scaled, {d['config']['repeats']} schedules per load. Source: "
               f"{source([stem])}.")
    return "\n".join(table(header, rows) + ["", caption])
