"""Generate the results tables of docs/benchmarks.md and docs/benchmarks-archive.md from the stored runs.

    python -m benchmarks.tables            # rewrite every marked table, and the manifest's quoted_in
    python -m benchmarks.tables --check    # exit 1 if a table or quoted_in is out of date, or a doc
                                           # holds a run of the other status

A table lives between two marker lines in the document::

    <!-- table:NAME -->
    ...generated, do not edit...
    <!-- /table:NAME -->

``TABLES`` maps each NAME to the function that renders it from the loaded results (label -> the run's
``result.json``, every run of ``benchmarks/results/manifest.json``). Every figure comes from the runs;
the caption under each table says where from and whether it was measured on a CPU, emulated or
simulated. docs/benchmarks.md holds the current runs' tables and the archive the superseded runs'
(``STATUS``), except tables of a check across runs (``ACROSS_RUNS``). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Callable, Iterable

from benchmarks.harness import manifest
from benchmarks.harness.baselines import PLAIN_GROUP, is_plain, reference_of
from benchmarks.harness.heldout import checks as heldout_checks, is_held_out
from benchmarks.harness.result import RESULT
from benchmarks.harness.emulation import MAX_OVERRUN_SHARE, is_invalid, worst_overrun
from benchmarks.harness.manifest import resolve

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
ARCHIVE = ROOT / "docs" / "benchmarks-archive.md"
DOCS = (DOC, ARCHIVE)
STATUS = {DOC: "current", ARCHIVE: "superseded"}  # the runs each doc's tables read

MARKER = re.compile(r"^<!-- table:([A-Za-z0-9_.-]+) -->$")
END = "<!-- /table:{} -->"

Results = dict[str, dict]


# ---------------------------------------------------------------- formatting

def fnum(x: float | None, digits: int = 1) -> str:
    """A number with thousands separators, or '-' for a missing one."""
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def fint(x: float | None) -> str:
    return "-" if x is None else f"{round(x):,}"


def fratio(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}x"


def fsec(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{fnum(x, digits)} s"


def spread(values: list[float | None], fmt: Callable[[float], str]) -> str:
    """One value when the repeats agree (or there is one), else 'mean (min-max)'."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    if len(set(fmt(v) for v in vals)) == 1:
        return fmt(vals[0])
    return f"{fmt(statistics.fmean(vals))} ({fmt(min(vals))}–{fmt(max(vals))})"


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


# label -> the run's folder, relative to the repository (``load_results`` fills it from the manifest)
RUN_PATHS: dict[str, str] = {}


def label_of(path: str) -> str:
    """A stored run's label from a path to it: its flat file's stem, or its folder's label
    (``<date>-<label>/`` or ``<date>-<label>/result.json``)."""
    p = Path(path)
    if p.name == RESULT:
        p = p.parent
    return manifest.folder_label(p) if p.suffix != ".json" else p.stem


def source(stems: Iterable[str]) -> str:
    """The runs' folders, as a reader finds them (``benchmarks/results/<benchmark>/<date>-<label>/``)."""
    return ", ".join(f"`{RUN_PATHS.get(s, f'benchmarks/results/{s}')}/`" for s in stems)


def mode_name(mode: str) -> str:
    """``baseline`` (stored runs, one plain SGLang) is "plain SGLang"; a run with several plain modes
    names each by how it is fed; a seer mode as is."""
    if mode == "baseline":
        return "plain SGLang"
    if is_plain(mode):
        return f"plain SGLang (`{mode}`)"
    return f"`{mode}`"


def pick(results: Results, pattern: str) -> list[str]:
    """Stems of the result files whose name matches ``pattern`` (a regex over the whole stem), sorted."""
    rx = re.compile(pattern)
    stems = sorted(s for s in results if rx.fullmatch(s))
    if not stems:
        raise KeyError(f"no results match {pattern!r}")
    return stems


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
    return out


def simulator_speculation(results: Results, cfg: dict) -> str:
    """How the simulator checks the run's speculative modes: drafting the replayed text itself where
    the acceptance file was measured on it (``SpecModel.from_replay``), else by that file's figures."""
    stem = Path(cfg["sim_acceptance"]).stem
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


SIM_ERROR_MODES = ("plain-group", "plain-router", "plain-router-p2", "group", "divided", "context", "context+arrival",
                   "oracle", "context+sd", "context+sd-fixed", "oracle+sd")


def rebuildable(run: dict) -> bool:
    """Whether the run's ``sim_check`` is the simulator's on a configuration it rebuilds: a run that
    recorded its commit (``meta``), or one rechecked when results were still rewritten."""
    return bool(run.get("meta") or run.get("sim_check_revision"))


def sim_errors_table(results: Results) -> str:
    """The simulator against every stored emulated run (``sim_check``, as the last recheck stored it,
    before results were written once): the signed error of each mode's predicted completion time. A mode whose worst
    repeat overran the profile on more than 5% of its steps measured the host, not the profile: it is
    shown, marked, and left out of the count."""
    checked = [s for s in pick(results, r"emulated_h100_.*") if results[s].get("sim_check")]
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
    caption = (f"Simulated against EMULATED runs (not GPU measurements): predicted / measured completion time "
               f"- 1 per mode, each run's workload, profile, KV and admission rule rebuilt from its file. "
               f"{within} of {len(errors)} valid mode-runs within 5% (largest miss "
               f"{max(errors, key=abs) * 100:+.1f}%)."
               + (f" Not shown: {', '.join(f'`{x}`' for x in old)}, whose configurations predate settings the "
                  f"rebuild needs; their tables keep the simulator of their day." if old else "")
               + f" Source: {source(stems)}.")
    return "\n".join(table(["run", "workload", *[mode_name(m) for m in SIM_ERROR_MODES]], rows) + ["", caption])


def sim_heldout_table(results: Results) -> str:
    """The simulator on its held-out configurations (``benchmarks.sim_heldout``): their ``sim_check``, apart
    from the runs above, which the simulator was corrected on."""
    stems = sorted(s for s in results if is_held_out(s) and results[s].get("sim_check"))
    if not stems:
        return ("No held-out run is stored yet: `python -m benchmarks.sim_heldout --run` runs the configurations "
                "`benchmarks/harness/heldout.py` fixes (seeds 9001-9003, every workload shape, Seer's load).")
    rows = []
    checked = heldout_checks([(stem, results[stem]) for stem in stems])
    for c in checked:
        cfg = results[c["run"]]["config"]
        rows.append([f"`{c['run']}`", f"{cfg['workload']}, {cfg['instances']} instances, seed {cfg['seed']}",
                     mode_name(c["mode"]), f"{c['error'] * 100:+.1f}%" if c["valid"] else "INVALID"])
    errors = [c["error"] for c in checked if c["valid"]]
    within = sum(abs(e) <= 0.05 for e in errors)
    caption = (f"HELD OUT: simulated against EMULATED runs of configurations fixed before they ran and used to "
               f"tune nothing. {within} of {len(errors)} valid mode-runs within 5%"
               + (f" (largest miss {max(errors, key=abs) * 100:+.1f}%)" if errors else "") + f". Source: {source(stems)}.")
    return "\n".join(table(["run", "configuration", "mode", "simulator error"], rows) + ["", caption])


def _recorded_at(replay: str) -> str:
    """' at temperature T' for a ``benchmarks.record_text`` file, from its own config."""
    try:
        path = resolve(replay)
    except FileNotFoundError:
        return ""
    return f" at temperature {json.loads(path.read_text())['config']['temperature']:g}"


TARGET_FORMAT: dict[str, Callable[[float], str]] = {
    "retractions": lambda x: f"{x:.0f} retractions", "throughput": lambda x: f"{x:.2f}x",
    "tail": lambda x: f"{x:.2f}x", "above": lambda x: f"{x:+.1%}", "oracle": lambda x: f"{x:.1%} behind",
    "overrun": lambda x: f"{x:.1%} of steps", "sim": lambda x: f"{x:+.1%}"}


def targets_table(results: Results, stems: list[str]) -> str:
    """``benchmarks.targets``: per run, each speed target met or missed, by how much and the run's own
    evidence of why; a validity check (overrun steps, the simulator) only where it fails."""
    rows = []
    for stem in stems:
        for r in results[stem]["targets"]["checks"]:
            if r["kind"] in ("overrun", "sim") and r["met"]:
                continue
            fmt = TARGET_FORMAT[r["kind"]]
            met = "not judged" if r["met"] is None else "yes" if r["met"] else "**no**"
            if r["met"] is False and r["short_by"] is not None:
                met += f", by {r['short_by']:.2f}x" if r["kind"] in ("throughput", "tail") \
                    else f", by {r['short_by'] * 100:.1f} points"
            rows.append([f"`{stem}`", mode_name(r["mode"]), r["target"], "-" if r["measured"] is None
                         else fmt(r["measured"]), met, r["why"] or "-"])
    caption = ("EMULATED runs (not GPU measurements), held to Seer's reported gains; the reasons quote the same "
               "run's `oracle` and the simulator's bound policies on the run's own workloads (SIMULATED). "
               "`python -m benchmarks.targets RUN` prints a stored run's targets as the code gives them now. Source: "
               + source(stems) + ".")
    return "\n".join(table(["run", "mode", "target", "measured", "met", "why"], rows) + ["", caption])


def sim_bounds_table(results: Results, stem: str) -> str:
    """``benchmarks.sim_bounds``: the simulator over an emulated run's workload shape, with bound policies
    and other acceptance, against plain SGLang on the same workloads."""
    d = results[stem]
    cfg = d["config"]
    rows = []
    for m, r in d["modes"].items():
        if m == "baseline":
            continue
        ratio = fratio(r["throughput"])
        if fratio(r["min"]) != fratio(r["max"]):
            ratio += f" ({fratio(r['min'])}–{fratio(r['max'])})"
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


# ---------------------------------------------------------------- scheduling cost, transfers

def sched_cost_table(results: Results, stems: list[str]) -> str:
    d = results[stems[0]]
    rows = [[f"`{r['policy']}`", fint(r["active_requests"]), str(r["instances"]),
             f"{r['median_us_per_call'] / 1000:.1f} ms", f"{r['p90_us_per_call'] / 1000:.1f} ms",
             fint(r["chunks_placed_per_call"]), f"{r['median_us_per_placed_chunk']:.0f} µs"] for r in d["results"]]
    caption = (f"CPU-measured ({d['machine']}, Python {d['python']}), pure policy objects, no engines. "
               f"Source: {source(stems)}.")
    return "\n".join(table(["policy", "active requests", "instances", "`schedule()` median", "p90",
                            "chunks placed per call", "median per placed chunk"], rows) + ["", caption])


def setup(d: dict) -> dict:
    """A cascade_verify run's device, heads and dtype: ``setup`` since runs carry the harness's ``meta``,
    ``meta`` in the runs before."""
    return d.get("setup") or d["meta"]


def cascade_verify_table(results: Results, stems: list[str]) -> str:
    """``benchmarks.cascade_verify``: one verify step's attention per layer, FlashInfer's single-level
    verify (what SGLang runs) against the three-level cascade, per GPU measured."""
    rows, devices = [], []
    for stem in stems:
        d = results[stem]
        devices.append(f"{setup(d)['device']} (torch {setup(d)['torch']})")
        for r in d["results"]:
            rows.append([setup(d)["device"], f"{r['groups']} x {r['siblings']}", fint(r["prompt"]), fint(r["own"]),
                         fint(r["context_slots"]), f"{r['saved_slots'] / r['context_slots']:.0%}",
                         f"{r['single_ms']:.3f} ms", f"{r['cascade_ms']:.3f} ms", fratio(r["speedup"]),
                         f"{r['max_abs_diff']:.4f}"])
    meta = setup(results[stems[0]])
    hq, hk, hd = meta["heads"]
    caption = (f"GPU-measured ({'; '.join(devices)}), one run, {meta['dtype'].removeprefix('torch.')}, "
               f"{hq} query heads, {hk} KV heads, head dim {hd}, {results[stems[0]]['results'][0]['draft_nodes']} "
               f"draft nodes per request, page size 1; times are the median per layer (CUDA events). "
               f"Source: {source(stems)}.")
    return "\n".join(table(["GPU", "groups x siblings", "prompt", "own tokens (up to)", "KV slots read by FlashInfer",
                            "read once instead", "FlashInfer verify", "cascade", "FlashInfer / cascade",
                            "largest difference"], rows) + ["", caption])


def gpu_step_table(results: Results, stem: str, flashinfer: str | None = None, rerun: str | None = None) -> str:
    """``benchmarks.gpu_step``: one TP rank of a GPU profile's model, measured, against the profile's terms;
    with ``flashinfer``, the same rank with FlashInfer's prefill kernel beside it, and with ``rerun``, how
    far a second run of the first moved."""
    d = results[stem]
    fi = results[flashinfer] if flashinfer and flashinfer in results else None
    prof, fit = d["profile_terms"], d["fitted"]
    terms = [  # (what, profile key or None, fitted key, unit scale, unit)
        ("weight read (measured: with the rank's launch gaps)", "weight_read_s", "decode_fixed_s", 1e3, "ms"),
        ("KV read per token", "decode_per_kv_token_s", "decode_per_kv_token_s", 1e9, "ns"),
        ("decode cost per sequence on the GPU", None, "decode_per_seq_s", 1e6, "µs"),
        ("compute per token (decode and verify)", "compute_per_token_s", "compute_per_token_s", 1e6, "µs"),
        ("prefill compute per token", "prefill_per_token_s", "prefill_per_token_s", 1e6, "µs"),
        ("prefill attention per query-key pair", "attention_per_pair_s", "attention_per_pair_s", 1e9, "ns"),
        ("prefill fixed cost", None, "prefill_intercept_s", 1e3, "ms"),
        ("prefill fixed cost as a CUDA graph (no host launches)", None, "prefill_graph_intercept_s", 1e3, "ms")]
    rows = []
    for what, pk, fk, scale, unit in terms:
        want = prof[pk] if pk else None
        if fk in fit:
            cells = [f"{fit[fk] * scale:.3g} {unit}"]
        elif rerun and fk in results.get(rerun, {}).get("fitted", {}):  # a term the first run did not time
            cells = [f"{results[rerun]['fitted'][fk] * scale:.3g} {unit} (second run)"]
        else:
            cells = ["-"]
        if fi is not None:
            got = fi["fitted"].get(fk)
            cells += [f"{got * scale:.3g} {unit}" if got is not None else "-",
                      fratio(got / want) if pk and got is not None else "-"]
        else:
            cells.append(fratio(fit[fk] / want) if pk else "-")
        rows.append([what, f"{want * scale:.3g} {unit}" if pk else "no term", *cells])
    head = (["term", "profile", "one rank, torch prefill", "one rank, FlashInfer prefill", "FlashInfer prefill / profile"]
            if fi is not None else ["term", "profile", "one rank, measured", "measured / profile"])
    arch = d["arch"]
    again = ""
    if rerun and rerun in results:
        r = results[rerun]
        moved = [abs(r["fitted"][k] / fit[k] - 1) for k in ("decode_fixed_s", "decode_per_kv_token_s",
                                                            "compute_per_token_s", "prefill_per_token_s",
                                                            "attention_per_pair_s", "prefill_intercept_s")]
        again = (f" A second run of the same rank, on another day and machine, moved these terms by {max(moved):.1%} "
                 f"at most ({source([rerun])}).")
    caption = (f"GPU-measured ({d['device']}, torch {d['torch']}, {d['dtype']}): one rank of TP {arch['tp']} of a "
               f"{arch['layers']}-layer, {arch['hidden']:,}-wide model ({arch['heads']} query / {arch['kv_heads']} KV "
               f"heads of {arch['head_dim']}, MLP {arch['intermediate']:,}), {d['rank_weight_bytes'] / 1e9:.1f} GB of "
               f"random weights, {d['rank_kv_bytes_per_token']:,} B of KV per token; {d['attention']}; "
               f"{d['timing']}; fitted over the points below. Profile: `{d['profile']}` (public figures, the whole "
               f"instance's step).{again} Source: {source([stem] + ([flashinfer] if fi is not None else []))}.")
    points = []
    for i, p in enumerate(d["points"]):
        shape = (f"decode, batch {p['batch']:,} x {p['kv_per_seq']:,} KV tokens" if p["kind"] == "decode"
                 else f"prefill, {p['new']:,} new after {p['cached']:,} cached")
        row = [shape, f"{p['measured_s'] * 1e3:.1f} ms", f"{p['profile_s'] * 1e3:.1f} ms", fratio(p["ratio"]),
               f"{p['profile_step_s'] * 1e3:.1f} ms", fratio(p["measured_s"] / p["profile_step_s"])]
        if fi is not None:
            q = fi["points"][i]
            row.append(fratio(q["measured_s"] / q["profile_step_s"]) if p["kind"] == "prefill" else "(same kernels)")
        points.append(row)
    return "\n".join(table(head, rows) + ["", caption, ""]
                     + table(["step", "one rank, measured", "profile, rank part", "measured / rank part",
                              "profile, whole step", "measured rank / whole step"]
                             + (["with FlashInfer prefill: rank / whole step"] if fi is not None else []), points))


def gpu_attention_table(results: Results, stem: str, fa2: str | None = None) -> str:
    """``benchmarks.gpu_attention``: one layer's attention of one rank, torch's kernels against
    FlashInfer's, and the whole model's terms fitted from them against the profile's."""
    d = results[stem]
    rows = []
    for p in d["points"]:
        shape = (f"decode, batch {p['batch']:,} x {p['kv_per_seq']:,} KV tokens" if p["kind"] == "decode"
                 else f"prefill, {p['new']:,} new after {p['cached']:,} cached")
        t, f = p["s"].get("torch"), p["s"].get("flashinfer")
        rows.append([shape, f"{t * 1e6:.0f} µs" if t else "-", f"{f * 1e6:.0f} µs" if f else "-",
                     fratio(t / f) if t and f else "-"])
    fit = d["fitted"]
    terms = []
    for key, label, scale, unit in [("decode_per_kv_token_s", "decode KV read per token", 1e9, "ns"),
                                     ("attention_per_pair_s", "prefill attention per query-key pair", 1e9, "ns")]:
        terms.append(f"{label}: torch {fit['torch'][key] * scale:.2f} {unit}, FlashInfer {fit['flashinfer'][key] * scale:.2f} "
                     f"{unit}")
    extra = ""
    if fa2 and fa2 in results:
        extra = (f" FlashInfer's FA2 prefill instead of the default: {results[fa2]['fitted']['flashinfer']['attention_per_pair_s'] * 1e9:.2f} ns "
                 f"per pair ({source([fa2])}).")
    caption = (f"GPU-measured ({d['device']}, torch {d['torch']}, FlashInfer {d.get('flashinfer', '-')}, {d['dtype']}): "
               f"{d['timing']}, one rank of `{d['profile']}` ({d['layers']} layers). Fitted for the whole model "
               f"({'; '.join(terms)}).{extra} Source: {source([stem])}.")
    return "\n".join(table(["attention of one layer", "torch", "FlashInfer", "torch / FlashInfer"], rows) + ["", caption])


def sim_profile_table(results: Results, pairs: list[tuple[str, str]]) -> str:
    """The 32-instance simulation on the public profile and on the one with measured rank terms."""
    rows = []
    for public, measured in pairs:
        a, b = results[public], results[measured]
        for m in b["ablation"]:
            if m == next(iter(b["ablation"])):
                continue
            x, y = a["ablation"][m], b["ablation"][m]
            rows.append([_workload_label(b), f"`{m}`", f"{fratio(x['ratio_throughput'])} / {fratio(x['ratio_tail'])}",
                         f"{fratio(y['ratio_throughput'])} / {fratio(y['ratio_tail'])}"])
    runs = [results[s] for p in pairs for s in p]
    first = runs[0]
    return "\n".join(table(["workload", "mode", f"`{results[pairs[0][0]]['config']['model']}`: throughput / tail",
                            "measured rank terms: throughput / tail"], rows)
                     + ["", _sim_caption(runs, [s for p in pairs for s in p],
                                         f"cells: against {_sim_reference(first)} in the same simulation")])


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
    rows = [[names[mode], f"{fnum(m[mode]['p50_ms'])} ms", f"{fnum(m[mode]['p90_ms'])} ms",
             " / ".join(fnum(x) for x in m[mode]["per_repeat_p50_ms"]),
             f"{m[mode]['cached_share_later_turns']:.0%}", str(m[mode]["turns_differing_from_plain"])]
            for mode in ("plain", "seer", "seer-no-session", "seer-instance")]
    seer_args = c.get("seer_args") or ""
    caption = (f"CPU (measured, not a GPU figure): model `{c['model']}`, float32; seer with {c['instances']} "
               f"instances{f' and `{seer_args}`' if seer_args else ' as launched by default (speculation on)'}, plain SGLang one instance, the cores split among them; {c['trajectories']} agent "
               f"trajectories x {c['turns']} turns of {c['max_tokens']} tokens, one agent at a time, each turn's "
               f"prompt the last one plus its answer and {c['observation_len']} new tokens (the first "
               f"{c['first_len']}); {c['repeats']} repeats in a random order after a warm-up. seer's p50 is "
               f"{d['seer_over_plain_p50_ms']:+.1f} ms from plain SGLang's, of which the frontend "
               f"{d['frontend_p50_ms']:+.1f} ms (seer against its own instance called directly). "
               f"Source: {source([stem])}.")
    return "\n".join(table(["per-turn latency", "p50", "p90", "p50 per repeat (ms)",
                            "prompt cached (turns 2+)", "turns not plain's tokens"], rows) + ["", caption])


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


# ---------------------------------------------------------------- drafters and draft server (CPU)

IMPL = {"ext": "C extension", "ctypes": "C core via ctypes", "python": "pure Python"}


def _drafters_caption(d: dict, stems: list[str]) -> str:
    m, data = d["machine"], d["data"]
    return (f"CPU-measured ({m['cpu']}, {m['cores']} cores, load average {m['loadavg_at_start'][0]:.2f} at start), "
            f"{data['group']} siblings x {data['tokens_per_sibling']:,} tokens ({data['source']}). "
            f"Source: {source(stems)}.")


def drafter_lookup_table(results: Results, stems: list[str]) -> str:
    d = results[stems[0]]
    rows = []
    for key, r in d["lookup"].items():
        impl, drafter, paths = key.split("/")
        rows.append([IMPL.get(impl, impl), f"`{drafter}`", paths.removeprefix("paths"),
                     f"{r['draft_us_p50']:.1f} µs", f"{r['draft_us_p99']:.1f} µs", f"{r['update1_us_p50']:.1f} µs",
                     f"{r['mean_draft_len']:.2f}"])
    return "\n".join(table(["implementation", "drafter", "paths", "draft p50", "draft p99",
                            "one-token append p50", "mean draft length"], rows) + ["", _drafters_caption(d, stems)])


def drafter_append_table(results: Results, stems: list[str]) -> str:
    d = results[stems[0]]
    mtok = lambda x: f"{x / 1e6:.2f}M"  # noqa: E731
    rows = [[IMPL.get(k, k), mtok(a["bulk_tok_per_s"]), mtok(a["chunk64_tok_per_s"]), mtok(a["chunk8_tok_per_s"]),
             mtok(a["chunk1_tok_per_s"]), fint(a["bytes_per_token"])] for k, a in d["append"].items()]
    return "\n".join(table(["implementation", "whole sequences (tok/s)", "64 per call", "8 per call", "1 per call",
                            "bytes per token"], rows) + ["", _drafters_caption(d, stems)])


def draft_server_table(results: Results, stems: list[str]) -> str:
    d = results[stems[0]]
    s = d["server"]
    cap, lag = s["capacity"], s["sync_lag_ms"]
    rows = [
        ["update capacity", f"{fint(cap['updates_per_s'])} request updates/s ({fint(cap['tokens_per_s'])} tokens/s), "
                            f"{cap['pumps']} pipelining clients, batches of {cap['batch']}, "
                            f"{cap['tokens_per_update']} tokens per update"],
        ["live sync", f"{s['instances']} instance processes, {s['groups']} groups x {s['requests_per_group']} requests, "
                      f"drafting every step for {s['seconds']:.0f} s"],
        ["sync delay", f"p50 {lag['p50']:.0f} ms / p99 {lag['p99']:.0f} ms ({lag['samples']} samples)"],
        ["traffic", f"{fint(s['updates_per_s'])} updates/s, {fint(s['tokens_in_per_s'])} tokens/s in, "
                    f"{fint(s['fetched_tokens_per_s'])} tokens/s fetched"],
        ["client timeouts", fint(s["client_timeouts"])],
    ]
    return "\n".join(table(["draft server", "measured"], rows) + ["", _drafters_caption(d, stems)])


# ---------------------------------------------------------------- speculative acceptance (CPU)

def _recording_label(outputs: str) -> tuple[str, str]:
    """Temperature and max tokens of a recording, from its file name (``spec_outputs_<run>[_tT][_N]``;
    ``benchmarks.spec_acceptance`` defaults: temperature 1.0, 256 tokens)."""
    stem = Path(outputs).stem
    t = re.search(r"_t(\d+(?:\.\d+)?)", stem)
    n = re.search(r"_(\d+)$", stem)
    return (t.group(1) if t else "1.0"), f"{int(n.group(1)):,}" if n else "256"


def spec_acceptance_table(results: Results, stems: list[str]) -> str:
    """Live drafter acceptance with full drafts verified (``--budget full``)."""
    rows = []
    for s in stems:
        d = results[s]
        cfg = d["config"]
        for name, r in d["drafters"].items():
            if name == "none":
                continue
            rows.append([f"`{s}`", f"{cfg['temperature']}", f"{cfg['prompts']} x {cfg['group_size']}, "
                         f"{cfg['max_tokens']}", cfg.get("arrival") or "together",
                         "SGLang `NGRAM`" if name == "ngram" else f"`{name}`",
                         f"{r['mean_acceptance_length']:.3f}", fnum(r.get("replay_acceptance_length"), 3),
                         fratio(d["acceptance_vs_suffix"].get(name)),
                         "yes" if r["identical_to_no_speculation"] else "no"])
    caption = ("CPU-measured (SmolLM2-135M, float32, seeded, 2 cores), one SGLang instance per drafter, full drafts "
               "verified (`--budget full`); replay: `benchmarks.draft_replay` over the no-speculation run's tokens "
               "(empty where the file predates it). Speeds are left out: with every draft verified on a CPU they "
               "measure the verify cost, not the drafter. Source: " + source(stems) + ".")
    return "\n".join(table(["run", "temperature", "prompts x G, max tokens", "arrival", "drafter",
                            "tokens per verify step", "replay", "vs `suffix`", "tokens identical to no speculation"],
                           rows) + ["", caption])


def spec_budget_table(results: Results, stems: list[str]) -> str:
    """One instance with the adaptive draft budget against the same instance without speculation."""
    rows = []
    for s in stems:
        d = results[s]
        none = d["drafters"]["none"]
        for name, r in d["drafters"].items():
            if name == "none":
                continue
            rows.append([f"`{s}`", f"`{name}`", fnum(none["tokens_per_s"]), fnum(r["tokens_per_s"]),
                         fratio(d["speed_vs_no_speculation"][name]), f"{r['mean_acceptance_length']:.3f}",
                         fnum(r.get("replay_acceptance_length"), 3), "yes" if r["identical_to_no_speculation"] else "no"])
    cfg = results[stems[0]]["config"]
    caption = (f"CPU-measured (SmolLM2-135M, {cfg['dtype']}, 2 cores), one run each: {cfg['prompts']} prompts x "
               f"{cfg['group_size']} samples of at most {cfg['max_tokens']} tokens at temperature {cfg['temperature']}, "
               f"all sent together, `--budget {cfg['budget']}`; replay: what full drafts would accept. "
               f"Source: {source(stems)}.")
    return "\n".join(table(["run", "drafter", "tok/s without speculation", "tok/s with", "with vs without",
                            "tokens per verify step", "replay (full drafts)", "tokens identical"], rows)
                     + ["", caption])


def replay_batch_table(results: Results, stems: list[str]) -> str:
    """Drafters replayed over recorded samples as a decode batch runs them."""
    rows = []
    for s in stems:
        d = results[s]
        cfg, dr = d["config"], d["drafters"]
        temp, max_tokens = _recording_label(cfg["outputs"])
        names = [n for n in ("group-suffix", "suffix", "sam") if n in dr]
        gs = dr.get("group-suffix", {})
        rows.append([f"`{Path(cfg['outputs']).stem}`", temp, max_tokens, cfg["arrival"]]
                    + [f"{dr[n]['acceptance_length']:.3f}" for n in names]
                    + [fratio(gs.get("vs_suffix")),
                       f"{fratio(gs.get('tail_vs_suffix'))} ({gs.get('tail_steps', 0)} steps)"])
    caption = ("Replayed on the CPU over samples recorded from SmolLM2-135M (4 prompts x 8, seeded), through the "
               "instances' own drafter objects (`--draft-tokens 8 --draft-paths 4`). Temperature and max tokens come "
               "from the recording's name (`_tT`, `_N`; default 1.0 and 256). Last column: steps after every sibling "
               "of the sample had finished. Source: " + source(stems) + ".")
    return "\n".join(table(["recording", "temperature", "max tokens", "arrival", "`group-suffix`", "`suffix`", "`sam`",
                            "`group-suffix` vs `suffix`", "same, all siblings finished"], rows) + ["", caption])


def replay_references_table(results: Results, stems: list[str]) -> str:
    """Each sample decoded alone after n of its siblings finished whole (the paper's reference experiment)."""
    rows = []
    ns = None
    for s in stems:
        d = results[s]
        cfg = d["config"]
        gs = d["acceptance_by_references"]["group-suffix"]
        ns = ns or list(gs)
        temp, max_tokens = _recording_label(cfg["outputs"])
        last = ns[-1]
        longest = results.get(s + "_longest")
        rows.append([temp, max_tokens] + [f"{gs[n]:.3f}" for n in ns]
                    + [fratio(d["vs_suffix"]["group-suffix"][last]),
                       fratio(longest["vs_suffix"]["group-suffix"][last]) if longest else "-"])
    header = ["temperature", "max tokens"] + [f"n = {n}" + (" (`suffix`)" if n == "0" else "") for n in ns or []]
    header += [f"n = {ns[-1] if ns else '?'} vs `suffix`", "same, longest match alone (`--blend 1,0`)"]
    longest = [s + "_longest" for s in stems if s + "_longest" in results]
    caption = ("Replayed on the CPU over recorded SmolLM2-135M samples (4 prompts x 8); cells: `group-suffix` tokens "
               "per verify step with n finished siblings (n = 0 is the per-request `suffix` drafter). Temperature and "
               "max tokens from the recording's name. Source: " + source(stems + longest) + ".")
    return "\n".join(table(header, rows) + ["", caption])


def text_acceptance_table(results: Results, stem: str) -> str:
    """Acceptance by finished siblings on the text an emulated run replays (the simulator's acceptance)."""
    d = results[stem]
    curves = d["acceptance_by_references"]
    ns = list(next(iter(curves.values())))
    rows = [[f"`{drafter}`"] + [f"{curve[n]:.2f}" for n in ns] for drafter, curve in curves.items()]
    caption = (f"Replayed on the CPU through the instances' own drafters ({d['config']['draft_tokens']} draft tokens, "
               f"{d['config']['draft_paths']} paths) over the recorded SmolLM2-135M text{_recorded_at(d['config']['outputs'])} "
               f"that the emulated run replays ({source([label_of(d['config']['outputs'])])}); each sample decoded alone after n of its "
               f"siblings finished. Cells: tokens per verify step. Source: {source([stem])}.")
    return "\n".join(table(["drafter"] + [f"n = {n}" for n in ns], rows) + ["", caption])


# ---------------------------------------------------------------- registry

ROLLOUT = r"cpu_(?!transfer).*"

# The emulated runs "Results at a glance" (docs/benchmarks.md) quotes, in its order: each one's targets are tabled.
TARGET_RUNS = ("emulated_h100_qwen2vl_workloads_x20", "emulated_h100_qwen2vl_workloads_x30",
               "emulated_h100_qwen2vl_group_x45",
               "emulated_h100_moonlight_workloads_ties",
               "emulated_h100_qwen2vl_sd_x60_t0.6_4k_warm", "emulated_h100_moonlight_sd_x30_t0.6_4k_warm",
               "emulated_h100_moonlight_sd_x30_t0.6_4k_spread",
               "emulated_h100_moonlight_sd_x30_t0.6_4k_oracle")

TABLES: dict[str, Callable[[Results], str]] = {
    "methodology": methodology_table,
    "emulated_h100_qwen2vl": lambda r: emulated_table(r, "emulated_h100_qwen2vl"),
    "emulated_h100_qwen2vl_seerload_x30": lambda r: emulated_table(r, "emulated_h100_qwen2vl_seerload_x30"),
    "sim_bounds_qwen2vl_seerload": lambda r: sim_bounds_table(r, "sim_bounds_qwen2vl_seerload"),
    "sim_errors": sim_errors_table,
    "sim_heldout": sim_heldout_table,
    "emulated_h100_qwen2vl_x15": lambda r: emulated_table(r, "emulated_h100_qwen2vl_x15"),
    "emulated_pool": lambda r: emulated_pool_table(r, "emulated_h100_qwen2vl_pool"),
    "emulated_h100_qwen2vl_workloads_x20": lambda r: emulated_table(r, "emulated_h100_qwen2vl_workloads_x20"),
    "emulated_h100_qwen2vl_workloads_x30": lambda r: emulated_table(r, "emulated_h100_qwen2vl_workloads_x30"),
    "emulated_h100_qwen2vl_group_x45": lambda r: emulated_table(r, "emulated_h100_qwen2vl_group_x45"),
    "sim_bounds_qwen2vl": lambda r: sim_bounds_table(r, "sim_bounds_qwen2vl"),
    "targets": lambda r: targets_table(r, [s for s in TARGET_RUNS if "targets" in r[s]]),
    "emulated_h100_qwen2vl_workloads": lambda r: emulated_table(r, "emulated_h100_qwen2vl_workloads"),
    "emulated_h100_moonlight_workloads": lambda r: emulated_table(r, "emulated_h100_moonlight_workloads"),
    "emulated_h100_moonlight_workloads_ties": lambda r: emulated_table(r, "emulated_h100_moonlight_workloads_ties"),
    "emulated_h100_qwen2vl_sd": lambda r: emulated_table(r, "emulated_h100_qwen2vl_sd_x30_plain"),
    "sim_bounds_moonlight": lambda r: sim_bounds_table(r, "sim_bounds_moonlight"),
    "text_acceptance_t06": lambda r: text_acceptance_table(r, "acceptance_text_smollm2_qwen2vl_32_t0.6"),
    "sim_bounds_qwen2vl_sd": lambda r: sim_bounds_table(r, "sim_bounds_qwen2vl_sd"),
    "emulated_h100_qwen2vl_sd_t06": lambda r: emulated_table(r, "emulated_h100_qwen2vl_sd_x30_t0.6"),
    "emulated_h100_qwen2vl_sd_t06_x60": lambda r: emulated_table(r, "emulated_h100_qwen2vl_sd_x60_t0.6"),
    "emulated_h100_qwen2vl_sd_t06_x60_4k": lambda r: emulated_table(r, "emulated_h100_qwen2vl_sd_x60_t0.6_4k"),
    "emulated_h100_qwen2vl_sd_t06_x60_4k_warm":
        lambda r: emulated_table(r, "emulated_h100_qwen2vl_sd_x60_t0.6_4k_warm"),
    "emulated_h100_moonlight_sd_t06_x30_4k": lambda r: emulated_table(r, "emulated_h100_moonlight_sd_x30_t0.6_4k"),
    "emulated_h100_moonlight_sd_t06_x30_4k_rerun":
        lambda r: emulated_table(r, "emulated_h100_moonlight_sd_x30_t0.6_4k_rerun"),
    "emulated_h100_moonlight_sd_t06_x30_4k_warm":
        lambda r: emulated_table(r, "emulated_h100_moonlight_sd_x30_t0.6_4k_warm"),
    "sim_bounds_moonlight_sd": lambda r: sim_bounds_table(r, "sim_bounds_moonlight_sd"),
    "emulated_h100_moonlight_sd_t06_x30_4k_spread":
        lambda r: emulated_table(r, "emulated_h100_moonlight_sd_x30_t0.6_4k_spread"),
    "emulated_h100_measured_qwen2vl_sd":
        lambda r: emulated_table(r, "emulated_h100_measured_qwen2vl_sd_x45_t0.6_4k"),
    "emulation_check": lambda r: emulation_check_table(r, "emulation_check_cpu"),
    "text_acceptance": lambda r: text_acceptance_table(r, "acceptance_text_smollm2_qwen2vl_32"),
    "rollout_cpu_tiny": lambda r: rollout_table([r["cpu_tiny"]], ["cpu_tiny"]),
    "rollout_cpu_smollm2": lambda r: rollout_table([r["cpu_smollm2"]], ["cpu_smollm2"],
                                                   exclude=("context+sd", "context+sd-suffix")),
    "rollout_cpu_smollm2_sd": lambda r: rollout_table([r[s] for s in pick(r, r"cpu_smollm2_sd(_rerun)?")],
                                                      pick(r, r"cpu_smollm2_sd(_rerun)?")),
    "sim_check": lambda r: sim_check_table(r, [s for s in pick(r, ROLLOUT) if "sim_check" in r[s]]),
    "sim_ablation": lambda r: sim_ablation_table(r, _sim_order(r)),
    "sim_speculation": lambda r: sim_spec_table(r, _sim_order(r)),
    "sched_cost": lambda r: sched_cost_table(r, ["sched_cost"]),
    "cascade_verify": lambda r: cascade_verify_table(r, pick(r, r"cascade_verify_.*")),
    "gpu_step": lambda r: gpu_step_table(r, "gpu_step_NVIDIA_H100_80GB_HBM3", "gpu_step_NVIDIA_H100_80GB_HBM3_flashinfer",
                                         "gpu_step_NVIDIA_H100_80GB_HBM3_rerun"),
    "gpu_attention": lambda r: gpu_attention_table(r, "gpu_attention_NVIDIA_H200", "gpu_attention_NVIDIA_H200_fa2"),
    "gpu_attention_h100": lambda r: gpu_attention_table(r, "gpu_attention_NVIDIA_H100_80GB_HBM3"),
    "sim_profile_measured": lambda r: sim_profile_table(
        r, [(f"sim_h100_{w}", f"sim_gpu_step_measured_{w}") for w in ("moonlight", "qwen2vl")]),
    "transfer": lambda r: transfer_table(r, pick(r, r"cpu_transfer_.*")),
    "kv_pool": lambda r: kv_pool_table(r, pick(r, r"kv_pool_cpu_.*")),
    "load": lambda r: load_table(r, "load_cpu"),
    "soak": lambda r: soak_table(r, "soak_cpu"),
    "multiturn": lambda r: multiturn_table(r, ["multiturn_cpu_tiny", "multiturn_cpu_tiny_nodraft"]),
    "slo": lambda r: slo_table(r, "slo_cpu"),
    "slo_emulated": lambda r: slo_table(r, "slo_emulated_h100"),
    "slo_emulated_frontier": lambda r: slo_frontier_table(r, "slo_emulated_h100"),
    "slo_emulated_load": lambda r: slo_load_table(r, "slo_emulated_h100"),
    "slo_emulated_light": lambda r: slo_table(r, "slo_emulated_h100_light"),
    "slo_emulated_light_load": lambda r: slo_load_table(r, "slo_emulated_h100_light"),
    "default_pool": lambda r: default_pool_table(r, pick(r, r"default_pool_cpu_.*")),
    "drafter_lookup": lambda r: drafter_lookup_table(r, ["drafters_cpu"]),
    "drafter_append": lambda r: drafter_append_table(r, ["drafters_cpu"]),
    "draft_server": lambda r: draft_server_table(r, ["drafters_cpu"]),
    "spec_acceptance": lambda r: spec_acceptance_table(
        r, [s for s in pick(r, r"spec_acceptance_.*") if r[s]["config"].get("budget") == "full"]),
    "spec_budget": lambda r: spec_budget_table(
        r, [s for s in pick(r, r"spec_acceptance_.*") if r[s]["config"].get("budget") != "full"]),
    "replay_batch": lambda r: replay_batch_table(r, _replay_order(r, r"draft_replay_.*_(together|staggered)")),
    "replay_references": lambda r: replay_references_table(r, _replay_order(r, r"draft_replay_.*_references")),
}


def _sim_order(results: Results) -> list[str]:
    order = {"moonlight": 0, "qwen2vl": 1, "kimik2": 2}
    return sorted(pick(results, r"sim_h100_.*"), key=lambda s: (order.get(s.rsplit("_", 1)[-1], 9), s))


def _replay_order(results: Results, pattern: str) -> list[str]:
    """Recordings by temperature (high first), then max tokens, then arrival."""
    def key(s: str):
        temp, max_tokens = _recording_label(results[s]["config"]["outputs"])
        return (int(max_tokens.replace(",", "")), -float(temp), s)
    return sorted(pick(results, pattern), key=key)


# ---------------------------------------------------------------- the document

class Read(dict):
    """The results by label, noting which labels a table reads (``quoted``): the manifest says which doc
    sections quote each run, and the docs hold only the runs of their status."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self.read.add(key)
        return value

    def get(self, key, default=None):
        if key in self:
            return self[key]
        return default


def load_results(results_dir: Path = RESULTS) -> Results:
    """Every stored result of the manifest (recordings are inputs, not results), by label."""
    out = Read()
    listing = Path(results_dir) / "manifest.json"
    RUN_PATHS.update({e.label: e.path for e in manifest.read(listing)})
    for label, entry in sorted(manifest.by_label(path=listing).items()):
        out[label] = entry.load()
    out.read.clear()
    return out


def render(text: str, results: Results, tables: dict[str, Callable[[Results], str]] | None = None
           ) -> tuple[str, list[str]]:
    """``text`` with every marked table regenerated, and the names of the tables whose content changed."""
    tables = TABLES if tables is None else tables
    lines = text.split("\n")
    out: list[str] = []
    changed: list[str] = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        out.append(lines[i])
        i += 1
        if not m:
            continue
        name = m.group(1)
        if name not in tables:
            raise KeyError(f"unknown table {name!r} (known: {', '.join(tables)})")
        try:
            j = lines.index(END.format(name), i)
        except ValueError:
            raise ValueError(f"table {name!r} has no end marker {END.format(name)!r}") from None
        new = ["", *tables[name](results).split("\n"), ""]  # blank lines keep the markers out of the table
        if lines[i:j] != new:
            changed.append(name)
        out += new
        i = j  # the end marker is copied on the next turn
    return "\n".join(out), changed


def marked(text: str) -> list[str]:
    return [m.group(1) for m in map(MARKER.match, text.split("\n")) if m]


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip("# ").strip().lower())
    return text.replace(" ", "-")


def quotes(doc: Path, results: Results, tables: dict[str, Callable[[Results], str]] | None = None
           ) -> dict[str, set[str]]:
    """label -> the sections of ``doc`` (``docs/<file>#<anchor>``) that quote the run: a table there reads
    it, or the prose names its folder or its label."""
    tables = TABLES if tables is None else tables
    labels = {label: path for label, path in RUN_PATHS.items()}
    out: dict[str, set[str]] = {}
    section = f"docs/{doc.name}"
    for line in doc.read_text().split("\n"):
        if line.startswith("#"):
            section = f"docs/{doc.name}#{slug(line)}"
            continue
        m = MARKER.match(line)
        found: set[str] = set()
        if m and m.group(1) in tables:
            results.read.clear()
            tables[m.group(1)](results)
            found |= results.read
        for label, path in labels.items():
            if path in line or f"`{label}`" in line:
                found.add(label)
        for label in found:
            out.setdefault(label, set()).add(section)
    return out


# Tables of a check across runs (the simulator against every stored emulated run): they read superseded
# runs too, since the check is about the simulator, not about which run a reader should quote.
ACROSS_RUNS = ("sim_errors",)


def status_errors(docs: dict[Path, str], results: Results) -> list[str]:
    """A table of docs/benchmarks.md that reads a superseded run, or one of the archive that reads only
    current runs: each doc holds the runs of its status (``STATUS``)."""
    status = {label: e.status for label, e in manifest.by_label().items()}
    errors = []
    for doc, wanted in docs.items():
        for name in marked(Path(doc).read_text()):
            if name in ACROSS_RUNS:
                continue
            results.read.clear()
            TABLES[name](results)
            got = {status[label] for label in results.read if label in status}
            if wanted == "current" and got - {"current"}:
                errors.append(f"{Path(doc).name}: table {name} reads a superseded run")
            if wanted == "superseded" and "superseded" not in got:
                errors.append(f"{Path(doc).name}: table {name} reads no superseded run")
    return errors


def quoted_in(results: Results) -> dict[str, list[str]]:
    """label -> every doc section that quotes the run, over both docs and the README."""
    out: dict[str, set[str]] = {}
    for doc in (*DOCS, ROOT / "README.md"):
        for label, sections in quotes(doc, results).items():
            out.setdefault(label, set()).update(sections)
    return {label: sorted(s) for label, s in out.items()}


def manifest_text(results: Results, path: Path = manifest.MANIFEST) -> str:
    """The manifest with each run's ``quoted_in`` as the docs have it now, and a run folder it did not
    list yet added as current (a later run's status is set by hand, with the run it replaces)."""
    data = json.loads(path.read_text())
    data["runs"] += [manifest.new_entry(folder) for folder in manifest.unlisted(path)]
    found = quoted_in(results)
    for run in data["runs"]:
        run["quoted_in"] = found.get(run["label"], [])
    return json.dumps(data, indent=1) + "\n"


def check(doc: Path = DOC, results_dir: Path = RESULTS) -> list[str]:
    """Names of the tables in ``doc`` that differ from what the results give (empty: up to date)."""
    _, changed = render(Path(doc).read_text(), load_results(results_dir))
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tables", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a table or the manifest's quoted_in is out "
                    "of date, or a doc holds a run of the other status; change nothing")
    ap.add_argument("--doc", type=Path, default=None, help="one doc only (default: docs/benchmarks.md and the archive)")
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    results = load_results(args.results)
    docs = [args.doc] if args.doc else list(DOCS)
    texts = {doc: doc.read_text() for doc in docs}
    placed = {n for text in texts.values() for n in marked(text)}
    missing = [n for n in TABLES if n not in placed]
    if missing and not args.doc:
        print(f"note: tables not placed in the docs: {', '.join(missing)}", file=sys.stderr)
    stale = []
    for doc, text in texts.items():
        new, changed = render(text, results)
        stale += [f"{doc.name}: {name}" for name in changed]
        if not args.check and new != text:
            doc.write_text(new)
    listing = args.results / "manifest.json"
    errors = [] if args.doc else status_errors(STATUS, results)
    quoted = None if args.doc else manifest_text(results, listing)
    if args.check:
        if quoted is not None and quoted != listing.read_text():
            stale.append(f"{listing.name}: quoted_in")
        for line in stale + errors:
            print(line)
        if stale or errors:
            print("run: python -m benchmarks.tables")
            return 1
        print(f"{', '.join(d.name for d in docs)}: {sum(len(marked(t)) for t in texts.values())} tables up to date")
        return 0
    if quoted is not None and quoted != listing.read_text():
        listing.write_text(quoted)
    for line in errors:
        print(line, file=sys.stderr)
    print(f"{', '.join(d.name for d in docs)}: rewritten: {', '.join(stale) or 'none'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
