"""One rank's attention alone on a GPU: torch's kernels (what ``benchmarks.gpu_step`` times) against
FlashInfer's (what SGLang runs), per layer, on the same shapes.

    python -m benchmarks.gpu_attention --out benchmarks/results/gpu_attention_<gpu>.json

``gpu_step`` times whole steps with torch's ``scaled_dot_product_attention`` in decode (one block per
sequence and KV head) and torch's or FlashInfer's prefill (torch's falls back to a masked kernel where
tokens are cached). This times the attention of one layer of the same rank, with the same functions
(``gpu_step.decode_attention``, ``gpu_step.prefill_attention``), in both libraries: decode over batches and KV lengths (FlashInfer's paged decode with tensor cores, as SGLang
uses it for grouped-query attention, over one page per sequence and over pages of one token as SGLang's
pool holds them: only the latter lets FlashInfer split a lone long sequence's KV), and one request's prefill of N new tokens after C cached
(FlashInfer's single prefill, causal to the lower right). Per library it fits the KV read per token of
decode and the time per query-key pair of prefill, both for the whole model (x layers).
``--smoke`` runs torch's side on the CPU to check the code.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a measurement runs, so --help needs none
    import torch

from benchmarks.harness.result import start as start_run
import benchmarks.gpu_step as gpu_step
from benchmarks.gpu_step import ARCHS, SMOKE, Arch, decode_attention, lstsq, prefill_attention, timed

DECODE = [(1, 1024), (1, 4096), (1, 16384), (16, 4096), (16, 16384), (64, 1024), (64, 4096), (256, 1024),
          (256, 4096), (1024, 1024)]
SMOKE_DECODE = [(1, 64), (1, 256), (64, 64), (64, 256)]
FEW = 16  # batches up to this many sequences: where a long sequence is read alone
PREFILL = [(1024, 0), (4096, 0), (8192, 0), (1024, 4096), (1024, 16384), (4096, 8192)]


def decode_case(arch: Arch, batch: int, length: int, device: str, dtype: torch.dtype, backends: list[str]) -> dict:
    import torch
    hq, hk, d = arch.rank_heads, arch.rank_kv_heads, arch.head_dim
    k = torch.randn(batch, length, hk, d, device=device, dtype=dtype)  # NHD, one page per sequence
    v = torch.randn_like(k)
    q = torch.randn(batch, hq, d, device=device, dtype=dtype)
    cuda = device == "cuda"
    out = {}
    if "torch" in backends:
        out["torch"] = timed(lambda: decode_attention(q, k, v), 20, cuda)
    for backend in ("flashinfer", "flashinfer_p1"):
        if backend not in backends:
            continue
        import flashinfer

        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            torch.empty(128 << 20, dtype=torch.uint8, device=device), "NHD", use_tensor_cores=True)
        i32 = dict(dtype=torch.int32, device=device)
        if backend == "flashinfer":  # one page per sequence, the page its whole context: k[b] is page b
            pages = (k, v)
            wrapper.plan(torch.arange(batch + 1, **i32), torch.arange(batch, **i32),
                         torch.full((batch,), length, **i32), hq, hk, d, length, q_data_type=dtype, kv_data_type=dtype)
        else:  # SGLang's token pool: pages of one token, so FlashInfer may split a long sequence's KV
            pages = (k.reshape(batch * length, 1, hk, d), v.reshape(batch * length, 1, hk, d))
            wrapper.plan(torch.arange(batch + 1, **i32) * length, torch.arange(batch * length, **i32),
                         torch.ones(batch, **i32), hq, hk, d, 1, q_data_type=dtype, kv_data_type=dtype)
        ref = decode_attention(q.float(), k.float(), v.float())
        out[f"{backend}_max_diff"] = float((wrapper.run(q, pages).float() - ref).abs().max())
        out[backend] = timed(lambda: wrapper.run(q, pages), 20, cuda)
    return out


def prefill_case(arch: Arch, new: int, cached: int, device: str, dtype: torch.dtype, backends: list[str]) -> dict:
    """``gpu_step``'s prefill attention per library (torch's time includes repeating the KV head)."""
    import torch
    hq, hk, d = arch.rank_heads, arch.rank_kv_heads, arch.head_dim
    k = torch.randn(new + cached, hk, d, device=device, dtype=dtype)  # NHD, as SGLang's KV pool
    v = torch.randn_like(k)
    q = torch.randn(new, hq, d, device=device, dtype=dtype)
    cuda = device == "cuda"
    out = {}
    runs = {backend: (lambda b=backend: prefill_attention(q, k, v, b)) for backend in backends}
    if "flashinfer" in runs:
        ref = prefill_attention(q, k, v, "torch").float()
        out["flashinfer_max_diff"] = float((runs["flashinfer"]().float() - ref).abs().max())
    for backend, run in runs.items():
        out[backend] = timed(run, 5, cuda)
    return out


def fit(points: list[dict], backend: str, layers: int) -> dict:
    """Per backend, for the whole model: decode KV read per token (over batches of 64 and more, which
    fill the GPU), the read per token of the longest sequence where a few are read alone (batches up to
    ``FEW``, over at least two lengths: the step model's ``decode_lone_kv_token_s``; a kernel that splits
    a long sequence's KV reads it at the bandwidth), and prefill time per query-key pair, each with an
    intercept."""
    dec = [p for p in points if p["kind"] == "decode" and backend in p["s"] and p["batch"] >= 64]
    few = [p for p in points if p["kind"] == "decode" and backend in p["s"] and p["batch"] <= FEW]
    pre = [p for p in points if p["kind"] == "prefill" and backend in p["s"]]
    out = {}
    if len(dec) >= 2:
        _, per_token = lstsq([[1.0, p["batch"] * p["kv_per_seq"]] for p in dec], [p["s"][backend] for p in dec])
        out["decode_per_kv_token_s"] = per_token * layers
    if len({p["kv_per_seq"] for p in few}) >= 2:
        _, lone = lstsq([[1.0, p["kv_per_seq"]] for p in few], [p["s"][backend] for p in few])
        out["decode_lone_kv_token_s"] = lone * layers
    if len(pre) >= 2:
        _, per_pair = lstsq([[1.0, p["new"] * (p["cached"] + p["new"] / 2)] for p in pre], [p["s"][backend] for p in pre])
        out["attention_per_pair_s"] = per_pair * layers
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="h100-70b", choices=sorted(ARCHS))
    ap.add_argument("--backends", default="torch,flashinfer,flashinfer_p1",
                    help="torch; flashinfer: one page per sequence; flashinfer_p1: pages of one token, as SGLang's pool")
    ap.add_argument("--smoke", action="store_true", help="torch only, a tiny architecture on the CPU")
    ap.add_argument("--cases", default="decode,prefill")
    ap.add_argument("--fi-backend", default="auto", choices=["auto", "fa2", "fa3"])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    run = start_run("gpu_attention", args.out)
    import torch

    cuda = torch.cuda.is_available() and not args.smoke
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    arch = SMOKE if args.smoke else ARCHS[args.profile]
    backends = args.backends.split(",") if cuda else ["torch"]
    decode, prefill = (DECODE, PREFILL) if not args.smoke else (SMOKE_DECODE, [(32, 0), (32, 64)])
    t0 = time.time()
    result = dict(benchmark="gpu_attention", device=torch.cuda.get_device_name() if cuda else "cpu",
                  torch=torch.__version__, dtype=str(dtype).replace("torch.", ""), smoke=args.smoke,
                  profile=args.profile, layers=arch.layers, backends=backends, flashinfer_prefill_backend=args.fi_backend,
                  timing="one layer's attention, median of CUDA-event timings", points=[])
    if cuda and "flashinfer" in backends:
        import flashinfer

        result["flashinfer"] = flashinfer.__version__
    gpu_step.FI_BACKEND = args.fi_backend
    cases = ([("decode", b, n) for b, n in decode] if "decode" in args.cases else []) + \
        ([("prefill", n, c) for n, c in prefill] if "prefill" in args.cases else [])
    for kind, a, b in cases:
        try:
            raw = (decode_case if kind == "decode" else prefill_case)(arch, a, b, device, dtype, backends)
        except Exception as e:  # a kernel that does not build or run: the other points still count
            print(f"{kind} {a} {b}: {type(e).__name__}: {e}", flush=True)
            raw = {"error": f"{type(e).__name__}: {e}"[:500]}
        point = dict(kind=kind, **({"batch": a, "kv_per_seq": b} if kind == "decode" else {"new": a, "cached": b}),
                     s={k: statistics.median(v) for k, v in raw.items() if isinstance(v, list)},
                     **{k: v for k, v in raw.items() if not isinstance(v, list)})
        result["points"].append(point)
        print(kind, a, b, {k: f"{v * 1e6:.1f} us" for k, v in point["s"].items()}, flush=True)
        result["fitted"] = {bk: fit(result["points"], bk, arch.layers) for bk in backends}
        result["wall_s"] = time.time() - t0
        run.write(result, partial=True)  # after every point: a run cut short keeps its points
    run.write(result)
    print(json.dumps(result["fitted"], indent=2))


if __name__ == "__main__":
    main()
