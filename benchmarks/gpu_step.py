"""One tensor-parallel rank of a GPU profile's model on a real GPU: measured step times against the
profile's step model.

    python -m benchmarks.gpu_step --profile h100-70b --out benchmarks/results/gpu_step_<gpu>.json

The ``h100-70b`` profile prices the steps of a dense 70B model on one 8xH100 instance (TP 8) from
public figures. One GPU runs one rank of that instance: its share of every layer (8 of 64 query heads,
1 of 8 KV heads, an eighth of each MLP and of the vocabulary) with random bf16 weights, which is all the
memory traffic and arithmetic a rank does. It measures the terms of the step model a rank spends alone:

- decode steps (each captured in a CUDA graph, as SGLang runs them) over batch sizes and KV lengths:
  the weight read, the KV read per token, and, at large batches, the compute per token that a verify
  step's tree nodes ride on;
- prefill steps (eager, as SGLang runs them) over new and cached lengths: compute per token and
  attention per query-key pair.

What one GPU cannot show stays as the profile has it: the all-reduces between ranks and the sampling
and scheduling per sequence (``decode_base_s``, ``decode_per_seq_s``). Each point's prediction is the
profile's rank part only: ``max(weight_read + kv * K, compute * T)`` for a decode step,
``max(weight_read, prefill * N + attention * pairs)`` for a prefill.

Decode attention is torch's ``scaled_dot_product_attention`` (a sequence's query heads share its one
KV head, so they are its query rows), which ``benchmarks.gpu_attention`` finds within 20% of FlashInfer's
decode. Prefill attention is torch's (the KV head repeated for its query heads, causal to the lower
right: an upper bound) or, with ``--attention flashinfer``, FlashInfer's single prefill, the kernel
SGLang's FlashInfer backend runs on an H100. ``--smoke`` runs a tiny architecture on the CPU to check
the code.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a measurement runs, so --help needs none
    import torch

from benchmarks.harness.manifest import load_run as load_result
from benchmarks.harness.result import start as start_run
from seer_sglang.core.step_model import PROFILES_DIR, StepModel


@dataclass(frozen=True)
class Arch:
    """A dense decoder's shape, and the tensor-parallel degree its profile assumes."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tp: int

    @property
    def rank_heads(self) -> int:
        return self.heads // self.tp

    @property
    def rank_kv_heads(self) -> int:
        return max(1, self.kv_heads // self.tp)

    @property
    def rank_intermediate(self) -> int:
        return self.intermediate // self.tp

    def rank_params(self) -> int:
        h, d = self.hidden, self.head_dim
        qkv = h * (self.rank_heads + 2 * self.rank_kv_heads) * d
        layer = qkv + self.rank_heads * d * h + 3 * h * self.rank_intermediate + 2 * h
        return self.layers * layer + self.vocab // self.tp * h + h

    def rank_kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return self.layers * 2 * self.rank_kv_heads * self.head_dim * dtype_bytes


ARCHS = {
    # Llama-3-70B, which the h100-70b profile's derivation names
    "h100-70b": Arch(layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, intermediate=28672,
                     vocab=128256, tp=8),
}
SMOKE = Arch(layers=2, hidden=256, heads=8, kv_heads=8, head_dim=32, intermediate=512, vocab=1024, tp=8)

DECODE = [  # (batch, KV tokens per sequence)
    (1, 1), (1, 4096), (16, 1), (16, 4096), (64, 1), (64, 1024), (64, 4096), (256, 1), (256, 1024),
    (256, 4096), (512, 2048), (1024, 1), (1024, 1024), (2048, 1), (4096, 1)]
PREFILL = [  # (new tokens, cached tokens)
    (256, 0), (1024, 0), (2048, 0), (4096, 0), (8192, 0), (1024, 4096), (1024, 16384), (4096, 8192)]


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Decode attention with torch's kernel: ``q`` (batch, query heads, dim), ``k``/``v`` (batch, length,
    KV heads, dim), the NHD layout of SGLang's KV pool. The query heads that share a KV head are that
    head's query rows, so the kernel needs no mask and no repeated KV head."""
    import torch.nn.functional as F
    b, hq, d = q.shape
    hk = k.shape[2]
    o = F.scaled_dot_product_attention(q.view(b, hk, hq // hk, d), k.transpose(1, 2), v.transpose(1, 2))
    return o.reshape(b, hq, d)


FI_BACKEND = "auto"  # FlashInfer's prefill implementation: fa3 on Hopper, or fa2
ATTENTION_NAMES = {"torch": "torch scaled_dot_product_attention",
                   "flashinfer": "decode: torch scaled_dot_product_attention; prefill: FlashInfer single_prefill_with_kv_cache"}


def prefill_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str = "torch") -> torch.Tensor:
    """One request's prefill attention: ``q`` (new tokens, query heads, dim) for the last tokens of
    ``k``/``v`` (all tokens, KV heads, dim; NHD), causal to the lower right (a new token sees every
    cached one). ``torch``: the KV head repeated for its query heads, and a masked kernel where tokens
    are cached; ``flashinfer``: FlashInfer's single prefill, which SGLang's FlashInfer backend runs."""
    import torch.nn.functional as F
    if backend == "flashinfer":
        import flashinfer

        return flashinfer.single_prefill_with_kv_cache(q, k, v, causal=True, backend=FI_BACKEND)
    from torch.nn.attention.bias import causal_lower_right

    n, hq, _ = q.shape
    total, hk, _ = k.shape
    qh = q.transpose(0, 1).unsqueeze(0)
    kr = k.transpose(0, 1).repeat_interleave(hq // hk, dim=0).unsqueeze(0)
    vr = v.transpose(0, 1).repeat_interleave(hq // hk, dim=0).unsqueeze(0)
    if total == n:
        o = F.scaled_dot_product_attention(qh, kr, vr, is_causal=True)
    else:
        o = F.scaled_dot_product_attention(qh, kr, vr, attn_mask=causal_lower_right(n, total))
    return o.squeeze(0).transpose(0, 1)


class Rank:
    """One rank's weights and KV buffers, and its decode and prefill forward passes."""

    def __init__(self, arch: Arch, kv_tokens: int, device: str, dtype: torch.dtype, attention: str = "torch"):
        import torch
        a = self.arch = arch
        self.device, self.dtype, self.attention = device, dtype, attention
        hq, hk, d = a.rank_heads, a.rank_kv_heads, a.head_dim

        def w(*shape):
            return torch.empty(*shape, device=device, dtype=dtype).normal_(0, 0.02)

        self.layers = [dict(qkv=w(a.hidden, (hq + 2 * hk) * d), o=w(hq * d, a.hidden),
                            gate_up=w(a.hidden, 2 * a.rank_intermediate), down=w(a.rank_intermediate, a.hidden),
                            ln1=torch.ones(a.hidden, device=device, dtype=dtype),
                            ln2=torch.ones(a.hidden, device=device, dtype=dtype))
                       for _ in range(a.layers)]
        self.lm_head = w(a.hidden, a.vocab // a.tp)
        self.norm = torch.ones(a.hidden, device=device, dtype=dtype)
        self.kv_tokens = kv_tokens
        self.k = [torch.zeros(kv_tokens * hk * d, device=device, dtype=dtype) for _ in range(a.layers)]
        self.v = [torch.zeros(kv_tokens * hk * d, device=device, dtype=dtype) for _ in range(a.layers)]

    def _mlp(self, x: torch.Tensor, layer: dict) -> torch.Tensor:
        import torch.nn.functional as F
        h = F.rms_norm(x, (x.shape[-1],), layer["ln2"])
        gate, up = (h @ layer["gate_up"]).chunk(2, dim=-1)
        return x + (F.silu(gate) * up) @ layer["down"]

    def decode(self, x: torch.Tensor, length: int) -> torch.Tensor:
        """One decode step of ``x.shape[0]`` sequences, each with ``length`` KV tokens before this one."""
        import torch.nn.functional as F
        a, b = self.arch, x.shape[0]
        hq, hk, d = a.rank_heads, a.rank_kv_heads, a.head_dim
        n = length + 1
        for i, layer in enumerate(self.layers):
            h = F.rms_norm(x, (a.hidden,), layer["ln1"])
            q, k, v = (h @ layer["qkv"]).split([hq * d, hk * d, hk * d], dim=-1)
            kc = self.k[i][:b * n * hk * d].view(b, n, hk, d)
            vc = self.v[i][:b * n * hk * d].view(b, n, hk, d)
            kc[:, length] = k.view(b, hk, d)
            vc[:, length] = v.view(b, hk, d)
            o = decode_attention(q.view(b, hq, d), kc, vc)
            x = x + o.reshape(b, hq * d) @ layer["o"]
            x = self._mlp(x, layer)
        return F.rms_norm(x, (a.hidden,), self.norm) @ self.lm_head

    def prefill(self, x: torch.Tensor, cached: int) -> torch.Tensor:
        """One request's prefill of ``x.shape[0]`` new tokens after ``cached`` ones."""
        import torch.nn.functional as F
        a, n = self.arch, x.shape[0]
        hq, hk, d = a.rank_heads, a.rank_kv_heads, a.head_dim
        total = cached + n
        for i, layer in enumerate(self.layers):
            h = F.rms_norm(x, (a.hidden,), layer["ln1"])
            q, k, v = (h @ layer["qkv"]).split([hq * d, hk * d, hk * d], dim=-1)
            kc = self.k[i][:total * hk * d].view(total, hk, d)
            vc = self.v[i][:total * hk * d].view(total, hk, d)
            kc[cached:] = k.view(n, hk, d)
            vc[cached:] = v.view(n, hk, d)
            o = prefill_attention(q.view(n, hq, d), kc, vc, self.attention)
            x = x + o.reshape(n, hq * d) @ layer["o"]
            x = self._mlp(x, layer)
        return F.rms_norm(x[-1:], (a.hidden,), self.norm) @ self.lm_head


def timed(fn, repeats: int, cuda: bool) -> list[float]:
    """Seconds per call of ``fn``, ``repeats`` times after two warm-ups (CUDA events on a GPU)."""
    import torch
    fn(), fn()
    out = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1000)
        else:
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return out


def graphed(fn, cuda: bool):
    """``fn`` captured once in a CUDA graph (after a warm-up on a side stream), and its replay: what the
    step costs the GPU without the host's kernel launches. On the CPU, ``fn`` itself."""
    import torch
    if not cuda:
        return fn, None
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        fn()
    return graph.replay, graph


def measure_decode(rank: Rank, batch: int, length: int, repeats: int, cuda: bool) -> list[float]:
    import torch
    x = torch.randn(batch, rank.arch.hidden, device=rank.device, dtype=rank.dtype)
    run, graph = graphed(lambda: rank.decode(x, length), cuda)
    try:
        return timed(run, repeats, cuda)
    finally:
        del graph
        if cuda:
            torch.cuda.empty_cache()


def measure_prefill(rank: Rank, new: int, cached: int, repeats: int, cuda: bool) -> tuple[list[float], list[float] | None]:
    """Eager times (as SGLang runs a prefill) and, on a GPU, the same step's times as a CUDA graph: the
    difference is the host's launch cost, which fused kernels and piecewise graphs cut."""
    import torch
    x = torch.randn(new, rank.arch.hidden, device=rank.device, dtype=rank.dtype)
    with torch.no_grad():
        eager = timed(lambda: rank.prefill(x, cached), repeats, cuda)
    if not cuda:
        return eager, None
    try:
        run, graph = graphed(lambda: rank.prefill(x, cached), cuda)
    except Exception as e:  # a kernel that cannot be captured: the eager times still count
        print(f"prefill N={new} C={cached}: no CUDA graph ({type(e).__name__}: {e})", flush=True)
        return eager, None
    try:
        return eager, timed(run, repeats, cuda)
    finally:
        del graph
        torch.cuda.empty_cache()


def rank_model(model: StepModel, point: dict) -> float:
    """The profile's time for a point, without what one rank cannot show (base, per sequence)."""
    if point["kind"] == "decode":
        memory = model.weight_read_s + model.decode_per_kv_token_s * point["kv_tokens"]
        return max(memory, model.compute_per_token_s * point["tokens"])
    n, c = point["new"], point["cached"]
    compute = model.prefill_per_token_s * n + model.attention_per_pair_s * n * (c + n / 2)
    return max(model.weight_read_s, compute)


def lstsq(rows: list[list[float]], ys: list[float]) -> list[float]:
    import torch
    sol = torch.linalg.lstsq(torch.tensor(rows, dtype=torch.float64), torch.tensor(ys, dtype=torch.float64)[:, None])
    return [float(v) for v in sol.solution[:, 0]]


def fit(points: list[dict]) -> dict:
    """The step model's rank terms fitted to the measured points.

    Memory-bound decode (batches up to 256, whose matmuls stay under the weight read):
    ``t = fixed + per_seq * B + kv * K`` (fixed: the weight read plus the rank's launch gaps); decode at
    the largest batches with one KV token: ``t = c0 + compute * T``; prefill:
    ``t = p0 + prefill * N + attention * pairs``, and the same for the prefills as CUDA graphs where the
    run has them (``*_graph_*``: the GPU's own time, without the host's launches).

    The KV fit leaves out long contexts in batches under 64. There a layer's decode attention takes
    about 0.1 ms whatever it reads (on an H100, one 4096-token sequence adds 4.1 ms to a step for 0.17
    GB read), which the batch's per-token term does not describe. Torch's decode kernel reads each
    sequence in one block, without splitting its KV; so does FlashInfer's over one page per sequence,
    the layout ``benchmarks.gpu_attention`` first measured. SGLang's pool holds pages of one token, over
    which FlashInfer may split a lone sequence: ``gpu_attention``'s ``flashinfer_p1`` measures that, and
    its ``decode_lone_kv_token_s`` is the step model's term for it.
    """
    dec = [p for p in points if p["kind"] == "decode" and p["batch"] <= 256
           and (p["kv_per_seq"] <= 1 or p["batch"] >= 64)]
    fixed, per_seq, kv = lstsq([[1.0, p["batch"], p["kv_tokens"]] for p in dec], [p["measured_s"] for p in dec])
    big = [p for p in points if p["kind"] == "decode" and p["kv_per_seq"] <= 1 and p["batch"] >= 1024]
    c0, compute = lstsq([[1.0, p["tokens"]] for p in big], [p["measured_s"] for p in big]) if len(big) >= 2 else (0, 0)
    pre = [p for p in points if p["kind"] == "prefill"]
    p0, per_token, attention = lstsq([[1.0, p["new"], p["new"] * (p["cached"] + p["new"] / 2)] for p in pre],
                                     [p["measured_s"] for p in pre])
    graphs = {}
    if pre and all("graph_s" in p for p in pre):
        g0, g_token, g_att = lstsq([[1.0, p["new"], p["new"] * (p["cached"] + p["new"] / 2)] for p in pre],
                                   [p["graph_s"] for p in pre])
        graphs = dict(prefill_graph_intercept_s=g0, prefill_graph_per_token_s=g_token, attention_graph_per_pair_s=g_att)
    return dict(decode_fixed_s=fixed, decode_per_seq_s=per_seq, decode_per_kv_token_s=kv, compute_intercept_s=c0,
                compute_per_token_s=compute, prefill_intercept_s=p0, prefill_per_token_s=per_token,
                attention_per_pair_s=attention, **graphs)


def measured_profile(result: dict, model: StepModel) -> StepModel:
    """The profile with the terms one rank measured, and the rest (the all-reduces and launches in
    ``decode_base_s``, sampling and scheduling per sequence) as the profile has them.

    The weight read takes the measured fixed part of a decode step (it holds the rank's own launch gaps,
    which ``decode_base_s`` also counts: the step is priced a little high), the per-sequence cost adds
    the rank's measured one, and attention per pair takes the run's prefill kernels (torch's: an upper
    bound). The measured prefill intercept (the fixed cost of an eager step, which
    ``max(weight_read, compute)`` hides) goes to ``prefill_base_s``; torch's unfused eager norms and
    activations make it an upper bound.
    """
    f = result["fitted"]
    kernels = "" if result.get("attention", ATTENTION_NAMES["torch"]) == ATTENTION_NAMES["torch"] else "; FlashInfer prefill"
    return replace(
        model, name=f"{model.name}-measured", source=f"{model.name} with one rank's terms measured on {result['device']} "
        f"(benchmarks.gpu_step{kernels})", weight_read_s=f["decode_fixed_s"], decode_per_kv_token_s=f["decode_per_kv_token_s"],
        decode_per_seq_s=model.decode_per_seq_s + max(0.0, f["decode_per_seq_s"]),
        compute_per_token_s=f["compute_per_token_s"], prefill_per_token_s=f["prefill_per_token_s"],
        attention_per_pair_s=f["attention_per_pair_s"], prefill_base_s=max(0.0, f["prefill_intercept_s"]))


def summarize(result: dict, model: StepModel) -> dict:
    """Each point's profile time and ratio, and the fit (on fresh measurements or a stored result)."""
    for p in result["points"]:
        p["profile_s"] = rank_model(model, p)
        p["ratio"] = p["measured_s"] / p["profile_s"] if p["profile_s"] else None
        # the whole instance's step: a rank's time plus what one GPU cannot show (all-reduces, sampling)
        p["profile_step_s"] = (model.decode_step(p["batch"], p["kv_tokens"]) if p["kind"] == "decode"
                               else model.prefill(p["new"], p["cached"]))
    result["profile_terms"] = {k: getattr(model, k) for k in (
        "weight_read_s", "decode_per_kv_token_s", "compute_per_token_s", "prefill_per_token_s", "attention_per_pair_s",
        "decode_base_s", "decode_per_seq_s")}
    result["fitted"] = fit(result["points"])
    return result


def measure(arch: Arch, smoke: bool, repeats: int, attention: str = "torch") -> dict:
    import torch
    cuda = torch.cuda.is_available() and not smoke
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    decode, prefill = DECODE, PREFILL
    if smoke:
        decode, prefill = [(1, 1), (4, 64), (4, 256), (64, 1), (128, 1), (1024, 1), (2048, 1)], [(32, 0), (64, 0), (32, 64)]
    kv_tokens = max(max(b * (n + 1) for b, n in decode), max(c + n for n, c in prefill))
    t0 = time.time()
    torch.manual_seed(0)
    rank = Rank(arch, kv_tokens, device, dtype, attention)
    points: list[dict] = []
    for batch, length in decode:
        ts = measure_decode(rank, batch, length, repeats, cuda)
        points.append(dict(kind="decode", batch=batch, kv_per_seq=length, tokens=batch, kv_tokens=batch * length,
                           measured_s=statistics.median(ts), spread_s=[min(ts), max(ts)]))
        print(f"decode B={batch} L={length}: {points[-1]['measured_s'] * 1e3:.2f} ms", flush=True)
    for new, cached in prefill:
        ts, gs = measure_prefill(rank, new, cached, max(3, repeats // 2), cuda)
        points.append(dict(kind="prefill", new=new, cached=cached, measured_s=statistics.median(ts),
                           spread_s=[min(ts), max(ts)], **({"graph_s": statistics.median(gs)} if gs else {})))
        print(f"prefill N={new} C={cached}: {points[-1]['measured_s'] * 1e3:.2f} ms"
              + (f", {points[-1]['graph_s'] * 1e3:.2f} ms as a CUDA graph" if gs else ""), flush=True)
    size = 2 if cuda else 4
    return dict(
        benchmark="gpu_step", device=torch.cuda.get_device_name() if cuda else "cpu", torch=torch.__version__,
        dtype=str(dtype).replace("torch.", ""), smoke=smoke, arch=asdict(arch), rank_params=arch.rank_params(),
        rank_weight_bytes=arch.rank_params() * size, rank_kv_bytes_per_token=arch.rank_kv_bytes_per_token(size),
        attention=ATTENTION_NAMES[attention], timing="median of CUDA-event timings; decode as CUDA graphs; prefill eager "
        "(measured_s) and as a CUDA graph (graph_s)",
        points=points, wall_s=time.time() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="h100-70b", choices=sorted(ARCHS))
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="a tiny architecture on the CPU (checks the code only)")
    ap.add_argument("--attention", default="torch", choices=sorted(ATTENTION_NAMES),
                    help="prefill attention kernels (decode always runs torch's, in CUDA graphs)")
    ap.add_argument("--from", dest="source", help="refit a stored result instead of measuring (no GPU needed); "
                    "the refit is printed, and written as a new run only with --out: a result is never rewritten")
    ap.add_argument("--profile-out", help="also write the profile with the measured rank terms (a StepModel JSON)")
    ap.add_argument("--out", help="names the run (benchmarks.harness.result); required unless --from is given")
    args = ap.parse_args()
    if not (args.out or args.source):
        ap.error("--out is required unless --from is given")
    run = start_run("gpu_step", args.out) if args.out else None
    if args.source:
        result = load_result(args.source)
        result.pop("meta", None)  # the new run's meta is its own
        args.profile = result["profile"]
    else:
        result = measure(SMOKE if args.smoke else ARCHS[args.profile], args.smoke, args.repeats,
                         "torch" if args.smoke else args.attention)
        result["profile"] = args.profile
    model = StepModel.load(PROFILES_DIR / f"{args.profile}.json")
    summarize(result, model)
    if run:
        run.write(result)
    print(json.dumps(result["fitted"], indent=2))
    if run:  # the measured profile belongs to the run, beside its result
        measured_profile(result, model).save(run.file("profile.json"))
    if args.profile_out:
        measured_profile(result, model).save(args.profile_out)


if __name__ == "__main__":
    main()
