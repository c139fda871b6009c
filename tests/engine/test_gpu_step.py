"""benchmarks.gpu_step: the rank it times computes one model's forward pass consistently (checked on
the CPU with a tiny architecture), and its fit recovers known step-model terms."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch

from benchmarks.harness.manifest import resolve
from benchmarks.gpu_step import SMOKE, Arch, Rank, fit, measured_profile, summarize
from seer_sglang.core.step_model import PROFILES_DIR, StepModel

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_decode_and_prefill_attend_to_the_same_cache():
    """A prefill of N + 1 tokens, a prefill of N then a decode step, and a prefill of N then a
    one-token prefill after N cached give the same logits for the last token: the decode path's
    shared-KV-head layout and the prefill's lower-right causal mask read the cache as the model would."""
    arch = Arch(layers=2, hidden=64, heads=8, kv_heads=2, head_dim=16, intermediate=128, vocab=96, tp=2)
    torch.manual_seed(0)
    rank = Rank(arch, kv_tokens=64, device="cpu", dtype=torch.float32)
    x = torch.randn(9, arch.hidden)
    whole = rank.prefill(x, cached=0)
    rank.prefill(x[:8], cached=0)
    step = rank.decode(x[8:], length=8)
    rank.prefill(x[:8], cached=0)
    chunked = rank.prefill(x[8:], cached=8)
    torch.testing.assert_close(step, whole, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(chunked, whole, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(rank.decode(x[8:], length=3), whole, atol=1e-3)  # another context, other logits


def test_rank_share_of_the_70b_profile():
    """One rank of Llama-3-70B at TP 8 holds an eighth of the weights and one KV head per layer: the
    sizes the h100-70b profile's derivation starts from."""
    from benchmarks.gpu_step import ARCHS

    arch = ARCHS["h100-70b"]
    model = StepModel.load(PROFILES_DIR / "h100-70b.json")
    assert arch.rank_params() * 2 == pytest.approx(17.5e9, rel=0.02)
    assert arch.rank_kv_bytes_per_token() * arch.tp == model.kv_bytes_per_token
    assert SMOKE.rank_heads == 1


def test_fit_recovers_known_terms():
    fixed, per_seq, kv, compute, p0, per_token, att = 0.01, 1e-5, 1.4e-8, 3.3e-5, 0.01, 3e-5, 1.3e-9
    points = []
    for b, n in [(1, 1), (16, 1), (64, 1), (64, 1024), (64, 4096), (256, 1), (256, 1024), (256, 4096),
                 (1, 4096)]:  # the last one is left out of the fit (too few sequences to fill the GPU)
        t = fixed + per_seq * b + kv * b * n + (0.004 if (b, n) == (1, 4096) else 0)
        points.append(dict(kind="decode", batch=b, kv_per_seq=n, tokens=b, kv_tokens=b * n, measured_s=t))
    for b in (1024, 2048, 4096):
        points.append(dict(kind="decode", batch=b, kv_per_seq=1, tokens=b, kv_tokens=b, measured_s=0.004 + compute * b))
    for n, c in [(256, 0), (1024, 0), (4096, 0), (1024, 16384), (4096, 8192)]:
        points.append(dict(kind="prefill", new=n, cached=c, measured_s=p0 + per_token * n + att * n * (c + n / 2)))
    f = fit(points)
    for key, want in [("decode_fixed_s", fixed), ("decode_per_seq_s", per_seq), ("decode_per_kv_token_s", kv),
                      ("compute_per_token_s", compute), ("prefill_intercept_s", p0),
                      ("prefill_per_token_s", per_token), ("attention_per_pair_s", att)]:
        assert f[key] == pytest.approx(want, rel=1e-6), key


@pytest.mark.parametrize("stem", ["gpu_step_NVIDIA_H100_80GB_HBM3", "gpu_step_NVIDIA_H100_80GB_HBM3_flashinfer"])
def test_stored_h100_result_and_its_profile(stem):
    """A stored H100 measurement refits to the terms its profile file holds, and that profile keeps
    what one GPU cannot measure (all-reduces, capacity) from the public one."""
    stored = json.loads(resolve(RESULTS / f"{stem}.json").read_text())
    base = StepModel.load(PROFILES_DIR / "h100-70b.json")
    result = summarize(json.loads(json.dumps(stored)), base)
    assert result["fitted"] == pytest.approx(stored["fitted"], rel=1e-9)  # least squares: last bits may differ
    measured = measured_profile(result, base)
    saved = StepModel.load(resolve(RESULTS / f"{stem}.profile.json"))
    numbers = {k: v for k, v in asdict(saved).items() if isinstance(v, float)}
    assert {k: asdict(measured)[k] for k in numbers} == pytest.approx(numbers, rel=1e-9)
    assert replace(measured, **numbers) == saved
    assert (measured.decode_base_s, measured.capacity_tokens) == (base.decode_base_s, base.capacity_tokens)
    assert measured.weight_read_s == pytest.approx(stored["fitted"]["decode_fixed_s"])


def test_flashinfer_prefill_is_cheaper_and_graphs_cut_the_fixed_cost():
    """The two H100 runs' prefill attention and fixed cost: FlashInfer's kernel against torch's, and
    each prefill as a CUDA graph (no host launches) against eager."""
    fi = json.loads(resolve(RESULTS / "gpu_step_NVIDIA_H100_80GB_HBM3_flashinfer.json").read_text())
    rerun = json.loads(resolve(RESULTS / "gpu_step_NVIDIA_H100_80GB_HBM3_rerun.json").read_text())
    assert fi["attention"].endswith("FlashInfer single_prefill_with_kv_cache")
    assert fi["fitted"]["attention_per_pair_s"] < 0.6 * rerun["fitted"]["attention_per_pair_s"]
    for run in (fi, rerun):
        pre = [p for p in run["points"] if p["kind"] == "prefill"]
        assert all(p["graph_s"] < p["measured_s"] * 1.05 for p in pre)
        assert run["fitted"]["prefill_graph_intercept_s"] < run["fitted"]["prefill_intercept_s"]


def test_attention_fit_recovers_known_terms_and_the_stored_run_refits():
    """benchmarks.gpu_attention: per backend, the KV read per token (batches of 64 and more) and the
    time per query-key pair, scaled to the whole model; the stored H200 run refits to its own terms."""
    from benchmarks.gpu_attention import fit as attention_fit

    per_token, per_pair, layers = 1e-10, 7e-12, 80
    points = [dict(kind="decode", batch=b, kv_per_seq=n, s={"x": 5e-5 + per_token * b * n})
              for b, n in [(64, 1024), (256, 1024), (256, 4096)]]
    points.append(dict(kind="decode", batch=1, kv_per_seq=4096, s={"x": 1e-4}))  # under 64: left out
    points += [dict(kind="prefill", new=n, cached=c, s={"x": 2e-5 + per_pair * n * (c + n / 2)})
               for n, c in [(1024, 0), (4096, 0), (1024, 16384)]]
    got = attention_fit(points, "x", layers)
    assert got["decode_per_kv_token_s"] == pytest.approx(per_token * layers, rel=1e-6)
    assert got["attention_per_pair_s"] == pytest.approx(per_pair * layers, rel=1e-6)
    assert "decode_lone_kv_token_s" not in got  # one length among the few-sequence batches: no slope
    lone = 1.2e-8  # a lone sequence read serially: its length, not the batch's KV, sets the time
    points += [dict(kind="decode", batch=b, kv_per_seq=n, s={"x": 3e-5 + lone * n}) for b, n in [(1, 1024), (16, 16384)]]
    points[3]["s"]["x"] = 3e-5 + lone * 4096
    assert attention_fit(points, "x", layers)["decode_lone_kv_token_s"] == pytest.approx(lone * layers, rel=1e-6)
    stored = json.loads(resolve(RESULTS / "gpu_attention_NVIDIA_H200.json").read_text())
    for backend in stored["backends"]:
        assert attention_fit(stored["points"], backend, stored["layers"]) == pytest.approx(stored["fitted"][backend],
                                                                                           rel=1e-9)


def test_attention_cases_run_on_cpu():
    """The torch side of each case runs on a tiny architecture (the GPU run adds FlashInfer's)."""
    from benchmarks.gpu_attention import decode_case, prefill_case

    arch = Arch(layers=2, hidden=64, heads=8, kv_heads=2, head_dim=16, intermediate=128, vocab=96, tp=2)
    assert len(decode_case(arch, 4, 32, "cpu", torch.float32, ["torch"])["torch"]) == 20
    assert all(t > 0 for t in prefill_case(arch, 16, 32, "cpu", torch.float32, ["torch"])["torch"])
