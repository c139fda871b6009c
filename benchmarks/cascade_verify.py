"""Tree-verify attention on a GPU: SGLang's single-level FlashInfer verify against the seer_cascade layout.

    python -m benchmarks.cascade_verify --out benchmarks/results/cascade_verify_<device>.json

One verify step of G groups x S siblings, each with a P-token shared prompt, O tokens of its own and a
D-node draft tree, over a page-size-1 KV pool as SGLang lays it out. ``single``: one
BatchPrefillWithPagedKVCacheWrapper over each request's whole context with SGLang's custom mask (what
FlashInfer's verify does); ``cascade``: the three levels of ``seer_sglang.kernels.cascade`` (the prompt read
once per group). Per shape: plan time (once per step), attention time per layer (median of CUDA-event
timings), the outputs' largest difference, and the ratio single / cascade. ``--dry-run`` builds the
layouts on CPU only (no kernels), to check the shapes.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.harness.result import start as start_run

if TYPE_CHECKING:  # torch is imported where a measurement runs, so --help needs none
    import torch


SHAPES = [  # (groups, siblings, prompt, own)
    (4, 8, 1024, 512), (8, 8, 2048, 1024), (4, 16, 2048, 2048), (8, 16, 4096, 1024), (2, 32, 4096, 4096)]


def make_step(groups: int, siblings: int, prompt: int, own: int, d: int, hq: int, hk: int, hd: int,
              device: str, dtype: torch.dtype, seed: int = 0) -> dict:
    import torch

    from seer_sglang.kernels.reference import tree_mask_from_parents

    gen = torch.Generator().manual_seed(seed)
    b = groups * siblings
    own_lens = torch.randint(max(1, own // 2), own + 1, (b,), generator=gen)
    seq = prompt + own_lens
    slots = int(groups * prompt + own_lens.sum() + b * d)
    perm = torch.randperm(slots, generator=gen)
    rows = torch.zeros(b, int(seq.max()), dtype=torch.int64)
    pos = groups * prompt
    for g in range(groups):
        for j in range(siblings):
            i = g * siblings + j
            n = int(own_lens[i])
            rows[i, :prompt] = perm[g * prompt:(g + 1) * prompt]
            rows[i, prompt:prompt + n] = perm[pos:pos + n]
            pos += n
    tree_slots = perm[pos:pos + b * d].view(b, d)
    parents = torch.full((b, d), -1, dtype=torch.long)
    for i in range(1, d):
        parents[:, i] = torch.randint(0, i, (b,), generator=gen)
    tree = tree_mask_from_parents(parents)
    out = dict(rows=rows, seq=seq, tree_slots=tree_slots, tree=tree,
               k=torch.randn(slots, 1, hk, hd, generator=gen).to(dtype),
               v=torch.randn(slots, 1, hk, hd, generator=gen).to(dtype),
               q=torch.randn(b * d, hq, hd, generator=gen).to(dtype))
    return {k: v.to(device) for k, v in out.items()}


def single_level(fi, workspace, step: dict, d: int, hq: int, hk: int, hd: int, dtype: torch.dtype):
    """SGLang's verify: each request's prefix then its tree, custom mask [D, seq + D] per request."""
    import torch
    b = step["seq"].numel()
    seq = step["seq"]
    kv_lens = seq + d
    indptr = torch.zeros(b + 1, dtype=torch.int32, device=seq.device)
    indptr[1:] = kv_lens.cumsum(0)
    cols = torch.arange(int(kv_lens.max()), device=seq.device).view(1, -1)
    full = torch.cat([step["rows"], torch.zeros_like(step["rows"][:, :d])], 1)
    full = full.scatter(1, seq.view(-1, 1) + torch.arange(d, device=seq.device), step["tree_slots"])
    indices = full[:, :cols.shape[1]][cols < kv_lens.view(-1, 1)].to(torch.int32)
    masks = torch.cat([torch.cat([torch.ones(d, int(n), dtype=torch.bool, device=seq.device), step["tree"][i]], 1)
                       .reshape(-1) for i, n in enumerate(seq.tolist())])
    wrapper = fi.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
    qo = (torch.arange(b + 1, device=seq.device) * d).to(torch.int32)
    wrapper.plan(qo, indptr, indices, torch.ones(b, dtype=torch.int32, device=seq.device), num_qo_heads=hq,
                 num_kv_heads=hk, head_dim_qk=hd, page_size=1, custom_mask=masks, causal=False,
                 sm_scale=1 / math.sqrt(hd), q_data_type=dtype, kv_data_type=dtype)
    return wrapper


def time_ms(fn, reps: int = 50) -> float:
    import torch
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--draft-nodes", type=int, default=9)
    ap.add_argument("--heads", default="28,4,128", help="query heads, KV heads, head dim (Qwen2.5-7B)")
    ap.add_argument("--dry-run", action="store_true", help="build the layouts on CPU, run no kernel")
    args = ap.parse_args()
    run = start_run("cascade_verify", args.out) if args.out else None
    import torch

    from seer_sglang.kernels.cascade import CascadeTreeVerify, cascade_layout, plan_layout, run_cascade_layout

    hq, hk, hd = (int(x) for x in args.heads.split(","))
    d, dtype = args.draft_nodes, torch.bfloat16
    device = "cpu" if args.dry_run else "cuda"
    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU with FlashInfer (or --dry-run)")
    results = []
    for groups, siblings, prompt, own in SHAPES:
        step = make_step(groups, siblings, prompt, own, d, hq, hk, hd, device, dtype)
        t0 = time.perf_counter()
        layout = cascade_layout(step["rows"], step["seq"], step["tree_slots"], step["tree"], 16)
        layout_ms = 1e3 * (time.perf_counter() - t0)
        row = dict(groups=groups, siblings=siblings, prompt=prompt, own=own, draft_nodes=d,
                   context_slots=int(step["seq"].sum()), shared_slots=layout.shared_slots,
                   saved_slots=layout.saved_slots, layout_ms=layout_ms)
        if not args.dry_run:
            import flashinfer

            workspace = torch.empty(256 << 20, dtype=torch.uint8, device=device)
            t0 = time.perf_counter()
            single = single_level(flashinfer, workspace, step, d, hq, hk, hd, dtype)
            torch.cuda.synchronize()
            row["single_plan_ms"] = 1e3 * (time.perf_counter() - t0)
            verifier = CascadeTreeVerify(device)
            t0 = time.perf_counter()
            plan_layout(verifier, layout, hq, hk, hd, 1 / math.sqrt(hd), dtype, dtype)
            torch.cuda.synchronize()
            row["cascade_plan_ms"] = 1e3 * (time.perf_counter() - t0) + layout_ms
            ref = single.run(step["q"], (step["k"], step["v"]))
            got = run_cascade_layout(verifier, layout, step["q"], step["k"], step["v"])
            row["max_abs_diff"] = float((got.float() - ref.float()).abs().max())
            row["single_ms"] = time_ms(lambda: single.run(step["q"], (step["k"], step["v"])))
            row["cascade_ms"] = time_ms(lambda: run_cascade_layout(verifier, layout, step["q"], step["k"], step["v"]))
            row["speedup"] = row["single_ms"] / row["cascade_ms"]
        results.append(row)
        print(json.dumps(row))
    if run:
        setup = {"device": torch.cuda.get_device_name() if not args.dry_run else "cpu (dry run)",
                 "heads": [hq, hk, hd], "dtype": str(dtype), "torch": torch.__version__}
        run.write({"setup": setup, "results": results})


if __name__ == "__main__":
    main()
