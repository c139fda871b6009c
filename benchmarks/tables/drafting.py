"""Tables of the drafters, the draft server and speculative acceptance."""

from __future__ import annotations

import re
from pathlib import Path


from .format import Results, fint, fnum, fratio, label_of, source, table
from .rollout import _recorded_at


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


def replay_widths_table(results: Results, stems: dict[str, str], by_recording: bool = False) -> str:
    """Acceptance at each verify width (the drafts a step takes, best first), per shape, drafter and
    number of draft paths: what a loaded batch's few drafts per request earn against a tail step's many.
    ``by_recording``: the rows are different recordings (each row names its own), not one per shape."""
    rows = []
    widths: list[str] = []
    for shape, stem in stems.items():
        d = results[stem]
        for drafter, by_paths in d["acceptance_by_width"].items():
            for paths, curve in by_paths.items():
                widths = widths or list(curve)
                rows.append([shape, f"`{drafter}`", paths] + [f"{curve[w]:.2f}" for w in widths])
    first = results[next(iter(stems.values()))]["config"]
    text = ("the recorded SmolLM2-135M texts named in the first column (their runs are in the sources)"
            if by_recording else
            f"the recorded SmolLM2-135M text each shape's emulated runs replay{_recorded_at(first['outputs'])}")
    caption = (f"Replayed on the CPU through the instances' own drafters (at most {first['draft_tokens']} draft tokens, "
               f"the whole group decoding together) over {text}. Columns: the draft nodes one request verifies in a "
               "step, taken best first as the budget gives them out (`--verify-width`). Cells: tokens per verify step. "
               f"Source: {source(list(stems.values()))}.")
    return "\n".join(table(["recording" if by_recording else "shape", "drafter", "paths"] + [f"{w} nodes" for w in widths],
                           rows) + ["", caption])
