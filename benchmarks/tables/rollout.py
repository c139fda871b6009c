"""Tables of the rollout benchmarks: CPU and emulated runs, their targets, the simulator's checks of them."""

from __future__ import annotations

import json
import statistics
from typing import Callable

from benchmarks.harness import manifest
from benchmarks.harness.baselines import PLAIN_GROUP, is_plain, reference_of
from benchmarks.harness.heldout import checks as heldout_checks, is_held_out
from benchmarks.harness.emulation import MAX_OVERRUN_SHARE, is_invalid, mode_runs, schedule_bound, worst_overrun
from benchmarks.harness.manifest import resolve
from benchmarks.harness.targets import check as check_targets

from .format import Results, fint, fnum, fratio, fsec, label_of, mode_name, pick, source, spread, table


# ---------------------------------------------------------------- rollout benchmark (CPU)

def _run_key(run: dict) -> str:
    """What makes two rollout files repeats of one command: the config without paths and measurements."""
    cfg = {k: v for k, v in run["config"].items() if k not in ("out", "calibration", "machine")}
    return json.dumps(cfg, sort_keys=True)


def rollout_table(runs: list[dict], stems: list[str], exclude: tuple[str, ...] = ()) -> str:
    """Per mode of ``benchmarks.rollout``: completion, throughput, tail, against the run's reference (the
    strongest plain SGLang mode it ran; ``baseline`` in runs before it was named). Several runs of the
    same command give mean (min–max)."""
    keys = {_run_key(r) for r in runs}
    if len(keys) != 1:
        raise ValueError(f"{stems}: not repeats of one command")
    cfg = runs[0]["config"]
    modes = [m for m in runs[0]["modes"] if m not in exclude]
    has_kv = any("kv" in r["modes"][m] for r in runs for m in modes)
    has_spec = any(r["modes"][m].get("mean_acceptance_length") for r in runs for m in modes)
    vs_context = has_spec and "context" in modes
    many = len(runs) > 1
    ref = reference_of(runs[0])
    header = ["mode", "completion", "output tok/s", f"throughput vs {mode_name(ref)}"]
    if vs_context:
        header.append("throughput vs `context`")
    header += ["tail (last 10%)", "tail vs plain" if ref == "baseline" else f"tail vs {mode_name(ref)}",
               "idle per instance", "retractions"]
    if has_kv:
        header += ["re-prefill tokens", "KV tokens from pool"]
    if has_spec:
        header.append("tokens per verify step")
    header.append("output tokens")
    rows = []
    for m in modes:
        per = [r["modes"][m] for r in runs]
        base = [r["modes"].get(reference_of(r)) for r in runs]
        row = [mode_name(m), spread([p["completion_s"] for p in per], fsec),
               spread([p["throughput_tok_s"] for p in per], lambda x: fnum(x, 1 if x < 1000 else 0)),
               spread([p["throughput_tok_s"] / b["throughput_tok_s"] if b else None for p, b in zip(per, base)],
                      fratio)]
        if vs_context:
            row.append(spread([p["throughput_tok_s"] / r["modes"]["context"]["throughput_tok_s"]
                               for p, r in zip(per, runs)], fratio) if "+sd" in m else "-")
        row += [spread([p["tail_s"] for p in per], fsec),
                spread([p["tail_s"] / b["tail_s"] if b and b["tail_s"] else None for p, b in zip(per, base)],
                       fratio),
                spread([p.get("idle_s_per_instance") for p in per], fsec),
                spread([p["retractions"] for p in per], fint)]
        if has_kv:
            kv = [p.get("kv") for p in per]
            row += [spread([k["reprefill_tokens"] if k else None for k in kv], fint),
                    spread([k["pool"] if k else None for k in kv], fint)]
        if has_spec:
            row.append(spread([p.get("mean_acceptance_length") for p in per], lambda x: fnum(x, 2)))
        row.append(spread([p["output_tokens"] for p in per], fint))
        rows.append(row)
    ws = cfg["workload_spec"]
    runs_note = (f"mean (min–max) over {len(runs)} runs of the same command" if many else "one run")
    machine = cfg["machine"].removeprefix("CPU ")
    caption = (f"CPU-measured ({machine}), {runs_note}: model `{cfg['model']}` ({cfg['dtype']}), "
               f"{cfg['instances']} instances, {cfg['prompts']} prompts x {cfg['group_size']} samples, "
               f"at most {cfg['max_tokens']:,} tokens ({ws['name']}-shaped lengths, mean {fnum(ws['mean_tokens'], 0)}), "
               f"chunk {cfg['chunk_size']}, {cfg['kv_tokens']:,} KV tokens per instance. Source: {source(stems)}.")
    if exclude:
        caption += " Not shown: " + ", ".join(f"`{m}`" for m in exclude if m in runs[0]["modes"]) + "."
    return "\n".join(table(header, rows) + ["", caption])


def sim_check_table(results: Results, stems: list[str]) -> str:
    """The simulator's completion time against the measured one, calibrated on the same engines."""
    rows = []
    for s in stems:
        for m, c in results[s].get("sim_check", {}).items():
            rows.append([f"`{s}`", mode_name(m), fsec(c.get("real_s", c.get("real_completion_s"))),
                         fsec(c.get("predicted_s", c.get("sim_completion_s"))),
                         f"{c['error'] * 100:+.0f}%"])
    caption = ("Measured on the CPU (2 cores) against the simulator's prediction from a step model calibrated on "
               "the same engines in the same run. Source: the `sim_check` part of " + source(stems) + ".")
    return "\n".join(table(["run", "mode", "measured (CPU)", "simulated", "simulated vs measured"], rows)
                     + ["", caption])


def unreported_row(mode: str, columns: int, runs: list[dict]) -> list[str]:
    """An invalid mode's row: its name and its overrun share, nothing else."""
    return [mode_name(mode), "not reported", *["-"] * (columns - 3), overruns(runs)]


def overruns(runs: list[dict]) -> str:
    """The worst repeat's share of overrun steps, marked when it makes the mode's figures invalid."""
    if not runs:
        return "-"
    worst = worst_overrun(runs)
    return f"{worst:.1%}" + (" INVALID" if is_invalid(runs) else "")


def emulated_table(results: Results, stem: str) -> str:
    """A ``benchmarks.rollout --emulate`` run: each mode's mean (min–max) over its repeats, its ratios
    against plain SGLang, and the simulator's prediction of the same run."""
    run = results[stem]
    cfg, emu = run["config"], run["emulation"]
    # ratios are against the run's reference: its strongest plain SGLang, or its first mode without one
    ref_mode = reference_of(run)
    ref = mode_name(ref_mode)
    header = ["mode", "completion", f"throughput vs {ref}", "tail (last 10%)", f"tail vs {ref}",
              "idle share per instance (min–max)", "retractions", "simulator predicts", "simulator error",
              "overrun steps (worst repeat)"]
    speculative = any(r.get("mean_acceptance_length") for r in run["modes"].values())
    if speculative:
        header.insert(7, "tokens per verify step")
    # the retracted requests' tokens, in runs whose instances counted them
    recounted = any("retracted_tokens" in r for r in run["modes"].values())
    if recounted:
        header.insert(7, "retracted tokens")
    # the paper's baseline beside the reference, where the run measured a stronger plain SGLang
    paper = PLAIN_GROUP if ref_mode != PLAIN_GROUP and PLAIN_GROUP in run.get("ratios_by_baseline", {}) else None
    if paper:
        header.insert(3, f"throughput vs {mode_name(paper)}")
    rows = []
    invalid = {m for m in run["modes"] if is_invalid(emu["per_mode"].get(m, []))}
    base_valid = ref_mode not in invalid  # a ratio against an invalid reference is no result either
    for m, r in run["modes"].items():
        if m in invalid:
            rows.append(unreported_row(m, len(header), emu["per_mode"][m]))
            continue

        def mean_range(key: str, fmt: Callable[[float], str]) -> str:
            sp = r["spread"].get(key)
            if sp is None:
                return "-"
            return fmt(r[key]) if fmt(sp["min"]) == fmt(sp["max"]) else \
                f"{fmt(r[key])} ({fmt(sp['min'])}–{fmt(sp['max'])})"
        idle = [x for x in r["idle_share"] if x is not None]
        check = run["sim_check"].get(m)
        per = run["ratios"][m].get("per_repeat") or []
        ratio = fratio(run["ratios"][m]["throughput"])
        if cfg.get("vary_trace") and per and fratio(min(per)) != fratio(max(per)):
            ratio += f" ({fratio(min(per))}–{fratio(max(per))})"
        rows.append([mode_name(m), mean_range("completion_s", fsec), ratio if base_valid else "-",
                     mean_range("tail_s", fsec), fratio(run["ratios"][m]["tail"]) if base_valid else "-",
                     f"{min(idle):.0%}–{max(idle):.0%}" if idle else "-", mean_range("retractions", fint),
                     fsec(check["predicted_s"]) if check else "-",
                     f"{check['error'] * 100:+.1f}%" if check else "-", overruns(emu["per_mode"].get(m, []))])
        if speculative:
            rows[-1].insert(7, mean_range("mean_acceptance_length", lambda x: f"{x:.2f}"))
        if recounted:
            rows[-1].insert(7, mean_range("retracted_tokens", fint))
        if paper:
            rows[-1].insert(3, fratio(run["ratios_by_baseline"][paper][m]["throughput"])
                            if paper not in invalid else "-")
    ws = cfg["workload_spec"]
    kv = (f"{cfg['kv_tokens']:,} KV tokens per instance, the profile's own capacity at this length scale "
          f"(the working set is {cfg['working_set_tokens'] / (cfg['kv_tokens'] * cfg['instances']):.1f}x "
          f"the instances' KV). " if cfg.get("kv_share") == 0 else
          f"{cfg['kv_tokens']:,} KV tokens per instance ({cfg['kv_share']:.0%} of its part of the working set"
          + (", the mean over the workloads). " if cfg.get("vary_trace") else "). "))
    caption = (f"EMULATED, not a GPU measurement: {cfg['instances']} real SGLang instances of model "
               f"`{cfg['model']}` on {cfg['machine']}, every step padded to the `{emu['profile']}` profile "
               f"(lengths x{emu['length_scale']:g}, times x{emu['time_scale']:g}). A mode whose worst repeat "
               f"has more than 5% overrun steps is INVALID and its figures are not reported: the host did not "
               f"keep up with the profile. "
               f"{cfg['prompts']} prompts x {cfg['group_size']} samples, {ws['name']}-shaped lengths up to "
               f"{cfg['max_tokens']:,} tokens (mean {fnum(ws['mean_tokens'], 0)}), chunk {cfg['chunk_size']}, "
               + kv + (f"Mean (min–max) over {cfg['repeats']} repeats, modes in a random order per repeat. "
                  if not cfg.get("vary_trace") else
                  f"Each of {cfg['repeats']} repeats runs another workload of "
                  f"the same shape (seeds {cfg['seed']}–{cfg['seed'] + cfg['repeats'] - 1}), every mode on it, in a "
                  f"random order; mean (min–max) over them; throughput: total over the repeats, with the range "
                  f"of the per-workload ratios. ")
               + (f"Every sample replays SmolLM2's recorded text{_recorded_at(cfg['replay'])} "
                  f"({source([label_of(cfg['replay'])])}), so drafts are accepted as on that text"
                  + (" (its tokens mapped one to one into the model's 4,096-id vocabulary)"
                     if cfg["model"] == "tiny-smollm2-4k" else "") + ". "
                  if cfg.get("replay") else "")
               + (simulator_speculation(results, cfg) if cfg.get("sim_acceptance") else "")
               + ("The context policies of this run ordered equal length estimates in arrival order, as they "
                  "did before they went sibling by sibling across groups. "
                  if cfg.get("context_ties") == "arrival" and any("context" in m for m in run["modes"]) else "")
               + ("Retractions and retracted tokens (their prompts and outputs: what readmitting them "
                  "prefills again, less what the radix cache kept) are the instances' own SGLang counters. "
                  if recounted else "")
               + regime_text(run) + f"Source: {source([stem])}.")
    return "\n".join(table(header, rows) + ["", caption])


def regime_text(run: dict) -> str:
    """The run's reference, regime and critical-path bound, for a caption (runs that recorded them)."""
    out = ""
    if run.get("reference") and is_plain(run["reference"]):
        out += (f"Ratios are against `{run['reference']}`, the fastest plain SGLang of the run"
                + (f" (of {', '.join(f'`{m}`' for m in run['ratios_by_baseline'])})"
                   if len(run.get("ratios_by_baseline", {})) > 1 else "") + ". ")
    g, b = run.get("regime"), run.get("bound")
    if g:
        out += (f"Regime: {g['requests_per_step']} requests per decode step on a loaded instance, a fixed share of "
                f"{g['fixed_share']:.0%} of its step, a full instance's step {g['full_over_idle']:.2f}x an idle "
                f"one's" + (" (below 2: a long tail costs little here)" if g["full_over_idle"] < 2 else "") + ". ")
    if b:
        out += (f"Critical path (the longest sample, {b['longest_tokens']} tokens, at the smallest step): "
                f"{b['critical_path_s']:.1f} s, {b['share']:.0%} of `{b['share_of']}`'s completion. ")
    work = schedule_bound(run, run["reference"]) if run.get("reference") in run.get("modes", {}) else None
    if work:
        out += (f"Work: `{run['reference']}`'s instances spent {work['work_s']:.0f} s each in steps of its "
                f"{work['completion_s']:.0f} s, so with the same steps no dispatch order is more than "
                f"{work['bound']:.2f}x faster. ")
    return out


def simulator_speculation(results: Results, cfg: dict) -> str:
    """How the simulator checks the run's speculative modes: drafting the replayed text itself where
    the acceptance file was measured on it (``SpecModel.from_replay``), else by that file's figures."""
    stem = label_of(cfg["sim_acceptance"])
    acceptance = source([stem])
    measured_on = results.get(stem, {}).get("config", {}).get("outputs")
    if cfg.get("replay") and measured_on == cfg["replay"]:
        return f"The simulator drafts the replayed text as the instances do (acceptance file: {acceptance}). "
    return f"The simulator's acceptance: {acceptance}. "


REGIMES = ("emulated", "CPU-measured", "GPU-measured", "simulated")
WHAT = {"emulated": "real SGLang instances of a small model on this 2-core CPU, every forward step padded to a GPU "
                    "step-time profile: the scheduling, queueing and retraction are real, the timings the profile's",
        "CPU-measured": "real SGLang instances on a 2-core x86_64 CPU without a GPU: mechanisms and overheads, not "
                        "GPU speed-ups",
        "GPU-measured": "kernels and one model rank timed on a GPU (H100, H200)",
        "simulated": "the real policy objects over a step-time model; no engine runs"}


def methodology_table(results: Results) -> str:
    """What each regime is, how many current runs it has, and the checks that say how far its figures
    hold: the emulation's overrun share and its check against real instances, the simulator against
    the emulated runs it did not see. Current runs only: the manifest's status decides."""
    current = {label: e for label, e in manifest.by_label("current").items() if label in results}
    rows = []
    for regime in REGIMES:
        labels = sorted(label for label, e in current.items() if e.regime == regime)
        rows.append([regime, WHAT[regime], str(len(labels)), ", ".join(sorted({current[s].benchmark for s in labels}))])
    emulated = [s for s, e in current.items() if e.regime == "emulated" and e.benchmark == "rollout"]
    valid = invalid = within = 0
    worst = 0.0
    for stem in emulated:
        run = results[stem]
        per_mode = run["emulation"].get("per_mode", {})
        for mode, runs in per_mode.items():
            if is_invalid(runs):
                invalid += 1
                continue
            worst = max(worst, worst_overrun(runs))
        if not rebuildable(run):
            continue  # the simulator of the run's day (its configuration predates the rebuild)
        for mode, c in run.get("sim_check", {}).items():
            if not is_invalid(per_mode.get(mode, [])):
                valid += 1
                within += abs(c["error"]) <= 0.05
    check = results["emulation_check_cpu"]
    errors = ", ".join(f"{mode_name(m)} {c['error']:+.1%}" for m, c in check["per_mode"].items())
    caption = (f"Validity of the emulated runs: a mode whose worst repeat overran the profile on more than "
               f"{MAX_OVERRUN_SHARE:.0%} of its steps measured the host, not the profile, and is reported as INVALID "
               f"({invalid} mode-runs across the {len(emulated)} current emulated rollout runs; the worst valid "
               f"mode overran {worst:.1%}). The emulation against real instances: `tiny-smollm2` padded to the step model "
               f"fitted on real SmolLM2 instances completes within {check['config']['bar']:.0%} of them ({errors}; "
               f"{source(['emulation_check_cpu'])}). The simulator held out from the runs: each emulated run's "
               f"`sim_check` predicts it from the profile its instances were padded to, its workload, KV cap and "
               f"admission rule (and the request overhead timed at its start), not from its measured times; "
               f"{within} of {valid} valid mode-runs of the current runs within 5%. Every run's regime is "
               f"in `benchmarks/results/manifest.json`.")
    return "\n".join(table(["regime", "what it is", "current runs", "benchmarks"], rows) + ["", caption])


SIM_ERROR_MODES = ("plain-group", "plain-sample", "plain-router", "plain-router-p2", "group", "divided", "context",
                   "context+arrival", "oracle", "context+sd", "context+sd-fixed", "oracle+sd")


def rebuildable(run: dict) -> bool:
    """Whether the run's ``sim_check`` is the simulator's on a configuration it rebuilds: a run that
    recorded its commit (``meta``), or one rechecked when results were still rewritten."""
    return bool(run.get("meta") or run.get("sim_check_revision"))


def sim_errors_table(results: Results, status: str = "current") -> str:
    """The simulator against every stored emulated run of ``status`` in the manifest (``sim_check``, as
    the last recheck stored it, before results were written once): the signed error of each mode's
    predicted completion time. A mode whose worst repeat overran the profile on more than 5% of its
    steps measured the host, not the profile: it is shown, marked, and left out of the count."""
    runs = manifest.by_label(status)
    checked = [s for s in pick(results, r"emulated_h100_.*") if s in runs and results[s].get("sim_check")]
    stems = [s for s in checked if rebuildable(results[s])]
    old = [s for s in checked if s not in stems]  # configs older than what the rebuild needs
    rows, errors = [], []
    for stem in stems:
        run = results[stem]
        cfg, per_mode = run["config"], run["emulation"].get("per_mode", {})
        cells = []
        for mode in SIM_ERROR_MODES:
            check = run["sim_check"].get(mode) or (run["sim_check"].get("baseline") if mode == PLAIN_GROUP else None)
            if check is None:
                cells.append("-")
                continue
            if is_invalid(per_mode.get(mode, []) or per_mode.get("baseline" if mode == PLAIN_GROUP else mode, [])):
                cells.append("INVALID")
                continue
            errors.append(check["error"])
            cells.append(f"{check['error'] * 100:+.1f}%")
        text = f"{cfg['workload']}, x{cfg['emulate_time_scale']:g}" + (", replayed text" if cfg.get("replay") else "")
        rows.append([f"`{stem}`", text, *cells])
    within = sum(abs(e) <= 0.05 for e in errors)
    caption = (f"Simulated against the {status} EMULATED runs (not GPU measurements): predicted / measured completion time "
               f"- 1 per mode, each run's workload, profile, KV and admission rule rebuilt from its file. "
               f"{within} of {len(errors)} valid mode-runs within 5% (largest miss "
               f"{max(errors, key=abs) * 100:+.1f}%)."
               + (f" Not shown: {', '.join(f'`{x}`' for x in old)}, whose configurations predate settings the "
                  f"rebuild needs; their tables keep the simulator of their day." if old else "")
               + f" Source: {source(stems)}.")
    shown = [i for i in range(len(SIM_ERROR_MODES)) if any(row[2 + i] != "-" for row in rows)]  # modes some run has
    return "\n".join(table(["run", "workload", *[mode_name(SIM_ERROR_MODES[i]) for i in shown]],
                           [row[:2] + [row[2 + i] for i in shown] for row in rows]) + ["", caption])


def sim_heldout_table(results: Results) -> str:
    """The simulator on its held-out configurations (``benchmarks.sim_heldout``): their ``sim_check``, apart
    from the runs above, which the simulator was corrected on. Only the current runs: a configuration run
    again replaces its earlier run in the manifest."""
    current = manifest.by_label("current")
    stems = sorted(s for s in results if is_held_out(s) and s in current and results[s].get("sim_check"))
    if not stems:
        return ("No held-out run is stored yet: `python -m benchmarks.sim_heldout --run` runs the configurations "
                "`benchmarks/harness/heldout.py` fixes (seeds 9001-9003, every workload shape, Seer's load).")
    rows = []
    checked = heldout_checks([(stem, results[stem]) for stem in stems])
    for c in checked:
        cfg = results[c["run"]]["config"]
        rows.append([f"`{c['run']}`", f"{cfg['workload']}, {cfg['instances']} instances, seed {cfg['seed']}",
                     mode_name(c["mode"]) + (" (its recorded placement)" if c.get("recorded_placement") else ""),
                     f"{c['error'] * 100:+.1f}%" if c["valid"] else "INVALID"])
    errors = [c["error"] for c in checked if c["valid"]]
    within = sum(abs(e) <= 0.05 for e in errors)
    recorded = any(c.get("recorded_placement") for c in checked)
    timed = any(rep.get("arrivals") for stem in stems for m in results[stem]["modes"].values()
                for rep in m.get("repeats", []))
    caption = (f"HELD OUT: simulated against EMULATED runs of configurations fixed before they ran and used to "
               f"tune nothing. {within} of {len(errors)} valid mode-runs within 5%"
               + (f" (largest miss {max(errors, key=abs) * 100:+.1f}%)" if errors else "") + ". "
               + ("A router's mode marked with its recorded placement is simulated as the router placed that run's "
                  "requests, " + ("each reaching its instance when the shims timed it" if timed else
                                  "in the order each instance got them (the shims' record)")
                  + ", not as the simulator would place them. " if recorded else "")
               + f"Source: {source(stems)}.")
    return "\n".join(table(["run", "configuration", "mode", "simulator error"], rows) + ["", caption])


def sim_recheck_table(results: Results, stem: str, every_mode: bool = False, moved: float | None = None) -> str:
    """A stored ``benchmarks.sim_recheck``: each run's ``plain-router-p2`` check (``every_mode``: every
    mode's) as stored and as the simulator gives it now, and the held-out runs' every mode, with how
    many valid mode-runs are within 5%, held-out and in-sample apart. With ``moved``, only the rows
    whose error moved by at least that much are listed (a recheck of many runs), and the caption
    says how many were left out."""
    data = results[stem]
    rows, counts, hidden = [], {(h, k): [] for h in (True, False) for k in ("stored", "now")}, 0
    for path, entry in data["runs"].items():
        label = label_of(path)
        run = results.get(label)
        held = is_held_out(label)
        modes = [m for m in entry["now"] if held or every_mode or m == "plain-router-p2"]
        for mode in modes:
            valid = run is None or not is_invalid(mode_runs(run, mode))
            old, new = entry["stored"].get(mode, {}).get("error"), entry["now"][mode]["error"]
            if valid and old is not None:
                counts[held, "stored"].append(old)
                counts[held, "now"].append(new)
            if moved is not None and valid and old is not None and abs(new - old) < moved:
                hidden += 1
                continue
            rows.append([f"`{label}`" + (" (held out)" if held else ""), mode_name(mode),
                         "-" if old is None else f"{old * 100:+.1f}%",
                         f"{new * 100:+.1f}%" if valid else "INVALID"])
    within = {k: sum(abs(e) <= 0.05 for e in v) for k, v in counts.items()}
    parts = [f"{name}, every valid mode listed: {within[held, 'stored']} of {len(counts[held, 'stored'])} within 5% "
             f"as stored, {within[held, 'now']} of {len(counts[held, 'now'])} now"
             for held, name in ((True, "Held-out runs"), (False, "In-sample runs")) if counts[held, "now"]]
    left_out = (f" Left out: {hidden} valid mode-runs whose error moved by less than {moved * 100:.1f} points."
                if moved is not None else "")
    caption = (f"SIMULATED against EMULATED runs: the simulator's signed error on each run as the run stored it "
               f"and as the simulator at `{data['simulator_revision']}` gives it (the run's result is not rewritten). "
               + "; ".join(parts) + "." + left_out + f" Source: {source([stem])}.")
    return "\n".join(table(["run", "mode", "stored check", "simulator now"], rows) + ["", caption])


def router_probe_table(results: Results, stem: str) -> str:
    """A stored ``benchmarks.router_probe``: per case, where the real sglang-router placed each request,
    where the simulator's model of ``cache_aware`` places it, and where the documented rule would."""
    data = results[stem]
    rows = [[c["case"], "held open" if c["held_open"] else "answered at once", " ".join(map(str, c["router"])),
             " ".join(map(str, c["model"])) + ("" if c["model_agrees"] else " (differs)"),
             " ".join(map(str, c["documented_rule"])) + ("" if c["documented_rule_agrees"] else " (differs)")]
            for c in data["cases"]]
    agree = {k: sum(c[f"{k}_agrees"] for c in data["cases"]) for k in ("model", "documented_rule")}
    caption = (f"MEASURED on the real sglang-router {data['router_version']} (`cache_aware`) in front of "
               f"{data['instances']} stand-in workers, no SGLang: the instance each request went to, in the order "
               f"sent ({data['gap_s'] * 1000:.0f} ms apart). Equal up to the instances' names counts as agreeing. "
               f"The simulator's model agrees in {agree['model']} of {len(rows)} cases, the documented smallest-tree "
               f"rule in {agree['documented_rule']}. Source: {source([stem])}.")
    return "\n".join(table(["requests", "workers", "router", "simulator's model", "documented rule"], rows)
                     + ["", caption])


def sim_steps_table(results: Results, stem: str) -> str:
    """A stored ``benchmarks.sim_recheck`` whose checks carry ``steps``: per run and mode, the simulator's
    error now beside its prefill batches, decode steps and their modelled time against the emulated
    instances' (all instances, mean per repeat), so a miss reads as fewer or cheaper steps, or as idle."""
    data = results[stem]
    rows = []
    for path, entry in data["runs"].items():
        label = label_of(path)
        run = results.get(label)
        for mode, check in entry["now"].items():
            if "steps" not in check or (run is not None and is_invalid(mode_runs(run, mode))):
                continue
            p, r = check["steps"]["predicted"], check["steps"]["real"]
            sim_s, real_s = p["prefill_s"] + p["decode_s"], r["prefill_s"] + r["decode_s"]
            rows.append([f"`{label}`" + (" (held out)" if is_held_out(label) else ""), mode_name(mode),
                         f"{check['error'] * 100:+.1f}%", f"{p['prefill_steps']:.0f} / {r['prefill_steps']:.0f}",
                         f"{p['decode_steps']:.0f} / {r['decode_steps']:.0f}",
                         f"{sim_s:.1f} / {real_s:.1f} s ({(sim_s / real_s - 1) * 100:+.1f}%)" if real_s else "-"])
    caption = (f"SIMULATED against EMULATED runs: the simulator at `{data['simulator_revision']}` (its error on "
               f"the run's completion) and its steps against the steps the emulated instances ran, all instances "
               f"together, mean per repeat (simulated / emulated), priced by the same profile. Source: "
               f"{source([stem])}.")
    return "\n".join(table(["run", "mode", "simulator error", "prefill batches", "decode steps", "steps' time"], rows)
                     + ["", caption])


def _recorded_at(replay: str) -> str:
    """' at temperature T' for a ``benchmarks.record_text`` file, from its own config."""
    try:
        path = resolve(replay)
    except FileNotFoundError:
        return ""
    return f" at temperature {json.loads(path.read_text())['config']['temperature']:g}"


TARGET_FORMAT: dict[str, Callable[[float], str]] = {
    "retractions": lambda x: f"{x:.0f} retractions", "throughput": lambda x: f"{x:.2f}x",
    "tail": lambda x: f"{x:.2f}x", "above": lambda x: f"{x:+.1%}", "ablation": lambda x: f"{x:.2f}x",
    "oracle": lambda x: f"{x:.1%} behind", "overrun": lambda x: f"{x:.1%} of steps", "sim": lambda x: f"{x:+.1%}"}


def targets_table(results: Results, stems: list[str]) -> str:
    """``benchmarks.targets``: per run, each speed target met or missed, by how much and the run's own
    evidence of why; a validity check (overrun steps, the simulator) only where it fails. The checks are
    the code's, over the run's stored figures and the simulator's bounds its run stored: a view of the
    run, as every table is."""
    rows = []
    for stem in stems:
        run = results[stem]
        for r in check_targets(run, run["targets"]["bounds"]):
            if r["kind"] in ("overrun", "sim") and r["met"]:
                continue
            fmt = TARGET_FORMAT[r["kind"]]
            met = "not judged" if r["met"] is None else "yes" if r["met"] else "**no**"
            if r["met"] is False and r["short_by"] is not None:
                met += f", by {r['short_by']:.2f}x" if r["kind"] in ("throughput", "tail", "ablation") \
                    else f", by {r['short_by'] * 100:.1f} points"
            rows.append([f"`{stem}`", mode_name(r["mode"]), r["target"], "-" if r["measured"] is None
                         else fmt(r["measured"]), met, r["why"] or "-"])
    caption = ("EMULATED runs (not GPU measurements), held to Seer's reported gains or, where the run measured "
               "sglang-router, to the targets against the strongest plain SGLang; the reasons quote the same "
               "run's `oracle` and the simulator's bound policies on the run's own workloads (SIMULATED). "
               "`python -m benchmarks.targets RUN` prints them with the simulator's bounds simulated again. Source: "
               + source(stems) + ".")
    return "\n".join(table(["run", "mode", "target", "measured", "met", "why"], rows) + ["", caption])


def ratio_with_range(r: dict) -> str:
    """A simulated mode's throughput over all its workloads, with the per-workload range where it has one."""
    ratio = fratio(r["throughput"])
    if fratio(r["min"]) != fratio(r["max"]):
        ratio += f" ({fratio(r['min'])}–{fratio(r['max'])})"
    return ratio


def sim_bounds_table(results: Results, stem: str) -> str:
    """``benchmarks.sim_bounds``: the simulator over an emulated run's workload shape, with bound policies
    and other acceptance, against plain SGLang on the same workloads."""
    d = results[stem]
    cfg = d["config"]
    rows = []
    for m, r in d["modes"].items():
        if m == "baseline":
            continue
        ratio = ratio_with_range(r)
        acc = r.get("mean_acceptance_length")
        mode, _, accepted_on = m.partition(" (")  # "<mode> (<acceptance>)" for a +sd mode
        rows.append([mode_name(mode) + (f" ({accepted_on}" if accepted_on else ""), ratio,
                     fratio(r["tail"]), f"{r['efficiency']:.2f}", f"{acc:.2f}" if acc else "-"])
    seeds = cfg["seeds"]
    span = f"seeds {seeds[0]}–{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    acceptance = "; ".join(f"`{k}`: {v}" for k, v in cfg.get("acceptance", {}).items())
    caption = (f"SIMULATED, not measured: the simulator over the step model, KV ({cfg['kv_tokens']:,} tokens per "
               f"instance), admission rule and workload shape of {source([label_of(cfg['from'])])} "
               f"(`{cfg['emulate']}` profile, times x{cfg['emulate_time_scale']:g}; {cfg['instances']} instances, "
               f"{cfg['prompts']} x {cfg['group_size']} {cfg['workload']}-shaped samples up to {cfg['max_tokens']} "
               f"tokens, chunk {cfg['chunk_size']}), {len(seeds)} workload{'s' if len(seeds) > 1 else ''} ({span}). "
               f"Throughput: total over the workloads vs plain SGLang's on the same ones, with the range of "
               f"the per-workload ratios; efficiency: the run's lower bound without speculation (throughput or longest "
               f"sample) over its completion time, so above 1 where drafts were accepted." + (f" Acceptance: {acceptance}." if acceptance else "")
               + f" Source: {source([stem])}.")
    return "\n".join(table(["mode", "throughput vs plain SGLang", "tail vs plain", "efficiency",
                            "tokens per verify step"], rows) + ["", caption])


def sim_load_table(results: Results, stems: list[str]) -> str:
    """``benchmarks.sim_bounds --prompts``: one emulated run's shape, instances and KV at several loads, each mode
    against the strongest plain SGLang simulated at that load, with the simulated instances' retractions."""
    rows = []
    for stem in stems:
        d = results[stem]
        cfg, ref = d["config"], d["reference"]
        load = f"{cfg['prompts']} groups ({cfg['working_set_over_kv']:.1f}x the KV)"
        for m, r in d["modes"].items():
            vs = r["vs_reference"]
            ratio = ratio_with_range(vs)
            acc = r.get("mean_acceptance_length")
            mode = "plain-group" if m == "baseline" else m.partition(" (")[0]  # sim_bounds' baseline: whole groups
            rows.append([load, mode_name(mode) + (", the reference" if m == ref else ""), ratio, fratio(vs["tail"]),
                         fint(r["retractions"]), f"{acc:.2f}" if acc else "-"])
    cfg = results[stems[0]]["config"]
    acceptance = "; ".join(cfg.get("acceptance", {}).values())
    caption = (f"SIMULATED, not measured: the simulator over the step model, KV ({cfg['kv_tokens']:,} tokens per "
               f"instance), admission rule and workload shape of {source([label_of(cfg['from'])])} "
               f"(`{cfg['emulate']}` profile, times x{cfg['emulate_time_scale']:g}; {cfg['instances']} instances, "
               f"groups of {cfg['group_size']} {cfg['workload']}-shaped samples up to {cfg['max_tokens']} tokens, "
               f"chunk {cfg['chunk_size']}), {len(cfg['seeds'])} workloads per load, the groups per workload "
               f"varied (`--prompts`). Ratios against the strongest plain SGLang simulated at the same load, "
               f"on the same workloads; the working set counts each group's prompt once and every output."
               + (f" Acceptance of `context+sd`: {acceptance}, no text drafted (the recording holds only the "
                  f"run's own groups)." if acceptance else "")
               + f" Source: {source(stems)}.")
    return "\n".join(table(["load", "mode", "throughput vs the strongest plain SGLang", "tail vs it",
                            "retractions", "tokens per verify step"], rows) + ["", caption])


def sim_profiles_table(results: Results, stems: list[str]) -> str:
    """``benchmarks.sim_bounds --profile``: one emulated run's shape, instances and KV simulated on several
    step-time profiles, each mode against the strongest plain SGLang simulated on the same profile."""
    rows = []
    for stem in stems:
        d = results[stem]
        for m, r in d["modes"].items():
            if m == "baseline":
                continue
            vs, acc = r["vs_reference"], r.get("mean_acceptance_length")
            rows.append([f"`{d['config']['emulate']}`", mode_name(m.partition(" (")[0]) + (", the reference" if m == d["reference"] else ""),
                         ratio_with_range(vs), fratio(vs["tail"]), f"{acc:.2f}" if acc else "-"])
    cfg = results[stems[0]]["config"]
    caption = (f"SIMULATED, not measured: the simulator over the KV ({cfg['kv_tokens']:,} tokens per instance), "
               f"admission rule and workload shape of {source([label_of(cfg['from'])])} (run on "
               f"`{cfg.get('source_emulate', cfg['emulate'])}`, times x{cfg['emulate_time_scale']:g}; "
               f"{cfg['instances']} instances, {cfg['prompts']} x {cfg['group_size']} {cfg['workload']}-shaped "
               f"samples up to {cfg['max_tokens']} tokens, chunk {cfg['chunk_size']}), {len(cfg['seeds'])} workloads, "
               f"on each profile in turn (`--profile`). Ratios against the strongest plain SGLang simulated on the "
               f"same profile and workloads, with the range over workloads. Source: {source(stems)}.")
    return "\n".join(table(["profile", "mode", "throughput vs the strongest plain SGLang", "tail vs it",
                            "tokens per verify step"], rows) + ["", caption])


def emulation_check_table(results: Results, stem: str) -> str:
    """``benchmarks.emulation_check``: per mode, real SmolLM2 instances against the tiny model padded to the
    profile fitted on them."""
    run = results[stem]
    rows = [[mode_name(m), fsec(r["real_s"]), fsec(r["emulated_s"]), f"{r['error'] * 100:+.1f}%",
             "yes" if r["within_bar"] else "no", f"{r['body_error'] * 100:+.1f}%",
             f"{fsec(r['real_tail_s'])} / {fsec(r['emulated_tail_s'])}",
             f"{fint(r['real_retractions'])} / {fint(r['emulated_retractions'])}"]
            for m, r in run["per_mode"].items()]
    cfg = run["config"]
    caption = (f"CPU-measured ({cfg['machine']}): the same rollouts ({' '.join(cfg['rollout_args'])}) on real "
               f"SmolLM2 instances and on `tiny-smollm2` instances padded to the step model the real run fitted, "
               f"{cfg['repeats']} run(s) per mode; emulation overrun steps {run['overrun_share']:.1%}. "
               f"Bar: within {cfg['bar']:.0%}. Source: {source([stem])}.")
    return "\n".join(table(["mode", "real SmolLM2", "emulated", "error", f"within {cfg['bar']:.0%}",
                             "error until 90% finished", "last 10% (real / emulated)", "retractions (real / emulated)"], rows) + ["", caption])


def emulated_pool_table(results: Results, stem: str) -> str:
    """The global KV pool on the emulated testbed: ``<mode>+pool`` against ``<mode>`` (and plain SGLang),
    with what the pool served, per repeat means."""
    run = results[stem]
    emu = run["emulation"]
    header = ["mode", "completion", "vs plain SGLang", "moves", "continuations", "context tokens from the pool",
              "recomputed tokens", "overrun steps (worst repeat)"]
    rows = []
    for m, r in run["modes"].items():
        if is_invalid(emu["per_mode"].get(m, [])):
            rows.append(unreported_row(m, len(header), emu["per_mode"][m]))
            continue
        kvs = [rep["kv"] for rep in r["repeats"] if rep.get("kv")]

        def mean(key: str) -> str:
            return fint(statistics.fmean(k[key] for k in kvs)) if kvs else "-"
        sp = r["spread"]["completion_s"]
        rows.append([mode_name(m), f"{fsec(r['completion_s'])} ({fsec(sp['min'])}–{fsec(sp['max'])})",
                     fratio(run["ratios"][m]["completion"]), mean("moves"), mean("continuations"), mean("pool"),
                     mean("recomputed"), overruns(emu["per_mode"].get(m, []))])
    cfg = run["config"]
    caption = (f"EMULATED, not a GPU measurement: {cfg['instances']} real SGLang instances of `{cfg['model']}`, steps "
               f"padded to `{emu['profile']}` (lengths x{emu['length_scale']:g}, times x{emu['time_scale']:g}); "
               f"pool reads are real reads of this machine's disk, not a GPU host's. {cfg['prompts']} x "
               f"{cfg['group_size']} samples, chunk {cfg['chunk_size']}, {cfg['kv_tokens']:,} KV tokens per instance. "
               f"Completion: mean (min–max) over {cfg['repeats']} repeats, and its ratio to plain SGLang's (lower "
               f"is faster); KV figures: mean per rollout. A mode whose worst repeat overran the profile on more than 5% of "
               f"its steps is INVALID and its figures are not reported. Source: {source([stem])}.")
    return "\n".join(table(header, rows) + ["", caption])



# ---------------------------------------------------------------- simulator

def _workload_label(run: dict) -> str:
    ws = run["config"]["workload_spec"]
    names = {"moonlight": "Moonlight", "qwen2vl": "Qwen2-VL", "kimik2": "Kimi-K2"}
    return f"{names.get(ws['name'], ws['name'])}-like (G={ws['group_size']}, max {ws['max_tokens'] // 1024}k)"


def _sim_caption(runs: list[dict], stems: list[str], what: str) -> str:
    cfg = runs[0]["config"]
    models = dict.fromkeys(f"`{r['config']['step_model']['name']}` ({r['config']['step_model']['source']})"
                           for r in runs)
    load = f", each instance's KV {cfg['kv_share']:.0%} of its part of the working set" if cfg.get("kv_share") else ""
    return (f"Simulated, not measured (`python -m seer_sglang.sim`): {cfg['instances']} instances, step model "
            f"{'; '.join(models)}; {cfg['prompts']} prompts, chunk {cfg['chunk_size']:,}{load}; {what}. "
            f"Source: {source(stems)}.")


def _sim_reference(run: dict) -> str:
    """The ablation's reference: its first mode (``round-robin`` is plain SGLang fed as veRL feeds it)."""
    first = next(iter(run["ablation"]))
    return "plain SGLang (`round-robin`)" if first == "round-robin" else f"`{first}`"


def sim_ablation_table(results: Results, stems: list[str]) -> str:
    runs = [results[s] for s in stems]
    modes = [m for m in runs[0]["ablation"] if "+sd" not in m]
    first = modes[0]
    rows = []
    for r in runs:
        ab = r["ablation"]
        rows.append([_workload_label(r)] + [f"{fratio(ab[m]['ratio_throughput'])} / {fsec(ab[m]['tail_s'], 0)}"
                                            for m in modes] + [fint(ab[first]["retractions"])])
    header = ["workload"] + [f"`{m}`" for m in modes] + [f"`{first}` retractions"]
    return "\n".join(table(header, rows) + ["", _sim_caption(
        runs, stems, f"cells: throughput vs {_sim_reference(runs[0])} / tail (last 10% of samples)")])


def sim_spec_table(results: Results, stems: list[str]) -> str:
    runs = [results[s] for s in stems]
    rows = []
    for r in runs:
        ab = r["ablation"]
        for m in [m for m in ab if "+sd" in m]:
            base = m.split("+sd")[0]
            rows.append([_workload_label(r), f"`{m}`", fratio(ab[m]["ratio_throughput"]),
                         fratio(ab[m]["throughput_tok_s"] / ab[base]["throughput_tok_s"]) if base in ab else "-",
                         fnum(ab[m]["mean_acceptance_length"], 2), fsec(ab[m]["tail_s"], 0)])
    cfg = runs[0]["config"]
    if cfg.get("acceptance"):
        what = (f"acceptance measured on recorded SmolLM2 text by the number of finished siblings "
                f"({source([label_of(cfg['acceptance'])])}, through the instances' own drafters)")
    else:
        what = (f"assumed acceptance, not calibrated on a real rollout: a draft token is accepted with probability "
                f"{cfg['spec_own_alpha']} from the request's own history, rising to {cfg['spec_group_alpha']} as its "
                f"siblings finish")
    return "\n".join(table(["workload", "mode", f"throughput vs {_sim_reference(runs[0])}",
                            "vs the mode without `+sd`", "tokens per verify step", "tail"], rows)
                     + ["", _sim_caption(runs, stems, what)])
