"""Tables of the scheduler's cost and of the GPU measurements (verify kernels, step times, attention)."""

from __future__ import annotations



from .format import Results, fint, fratio, source, table
from .rollout import _sim_caption, _sim_reference, _workload_label


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
    FlashInfer's (over one page per sequence, and where the run has it, over pages of one token as
    SGLang's pool), and the whole model's terms fitted from them against the profile's."""
    d = results[stem]
    p1 = any("flashinfer_p1" in p["s"] for p in d["points"])
    rows = []
    for p in d["points"]:
        shape = (f"decode, batch {p['batch']:,} x {p['kv_per_seq']:,} KV tokens" if p["kind"] == "decode"
                 else f"prefill, {p['new']:,} new after {p['cached']:,} cached")
        t, f, f1 = p["s"].get("torch"), p["s"].get("flashinfer"), p["s"].get("flashinfer_p1")
        rows.append([shape, f"{t * 1e6:.0f} µs" if t else "-", f"{f * 1e6:.0f} µs" if f else "-",
                     *([f"{f1 * 1e6:.0f} µs" if f1 else "-"] if p1 else []), fratio(t / f) if t and f else "-"])
    fit = d["fitted"]
    terms = []
    for key, label, scale, unit in [("decode_per_kv_token_s", "decode KV read per token", 1e9, "ns"),
                                     ("decode_lone_kv_token_s", "decode read per token of a lone sequence", 1e9, "ns"),
                                     ("attention_per_pair_s", "prefill attention per query-key pair", 1e9, "ns")]:
        got = [f"{name} {fit[b][key] * scale:.2f} {unit}" for b, name in
               (("torch", "torch"), ("flashinfer", "FlashInfer"), ("flashinfer_p1", "FlashInfer, pages of one token"))
               if key in fit.get(b, {})]
        if got:
            terms.append(f"{label}: {', '.join(got)}")
    extra = ""
    if fa2 and fa2 in results:
        extra = (f" FlashInfer's FA2 prefill instead of the default: {results[fa2]['fitted']['flashinfer']['attention_per_pair_s'] * 1e9:.2f} ns "
                 f"per pair ({source([fa2])}).")
    caption = (f"GPU-measured ({d['device']}, torch {d['torch']}, FlashInfer {d.get('flashinfer', '-')}, {d['dtype']}): "
               f"{d['timing']}, one rank of `{d['profile']}` ({d['layers']} layers). Fitted for the whole model "
               f"({'; '.join(terms)}).{extra} Source: {source([stem])}.")
    head = ["attention of one layer", "torch", "FlashInfer"] + (["FlashInfer, pages of one token"] if p1 else [])
    return "\n".join(table(head + ["torch / FlashInfer"], rows) + ["", caption])


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
