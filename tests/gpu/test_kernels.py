"""Tree-verify attention: the torch reference against independent torch attention, the Triton kernels
(interpreted on CPU, native on GPU) and the FlashInfer cascade path against the reference.

This module must not import triton: the interpreted checks run in a subprocess that sets
TRITON_INTERPRET=1 before triton is first imported.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flashinfer_model import torch_flashinfer
from seer_sglang.kernels.reference import (KVLevel, attention_with_lse_ref, merge_states_ref, ragged_attention_with_lse_ref,
                                    tree_mask_from_parents, tree_verify_attention_levels_ref,
                                    tree_verify_attention_ref)

HAS_CUDA = torch.cuda.is_available()


def make_case(seed: int = 0, dtype: torch.dtype = torch.float32, device: str = "cpu", hq: int = 4, hk: int = 2,
              d: int = 16, t: int = 5):
    """Six requests in three groups (prefixes 23, 0 and 12 keys), own KV 0-16 keys, random trees of t nodes."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    prefix_lens, own_lens = [23, 0, 12], [0, 7, 3, 16, 1, 9]
    b = len(own_lens)
    prefix = KVLevel(rnd(sum(prefix_lens), hk, d), rnd(sum(prefix_lens), hk, d),
                     torch.tensor([0, 2, 3, 6], device=device),
                     torch.tensor([0, 23, 23, 35], device=device))
    own_indptr = torch.tensor([0] + list(torch.tensor(own_lens).cumsum(0)), device=device)
    own = KVLevel.per_request(rnd(sum(own_lens), hk, d), rnd(sum(own_lens), hk, d), own_indptr)
    parents = torch.full((b, t), -1, dtype=torch.long)
    for i in range(1, t):
        parents[:, i] = torch.randint(0, i, (b,), generator=gen)
    return dict(q=rnd(b, t, hq, d), levels=[prefix, own], k_tree=rnd(b, t, hk, d), v_tree=rnd(b, t, hk, d),
                tree_mask=tree_mask_from_parents(parents).to(device), sm_scale=1.0 / math.sqrt(d))


# --- the reference ------------------------------------------------------------------------------------


def test_tree_mask_from_parents():
    mask = tree_mask_from_parents(torch.tensor([[-1, 0, 0, 1, 3]]))[0].int().tolist()
    assert mask == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 0, 1, 1]]


def test_attention_with_lse_ref_matches_sdpa():
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(6, 4, 16, generator=gen)
    k, v = torch.randn(9, 2, 16, generator=gen), torch.randn(9, 2, 16, generator=gen)
    mask = torch.rand(6, 9, generator=gen) < 0.6
    mask[:, 0] = True
    mask[5] = False  # a row that sees nothing
    o, lse = attention_with_lse_ref(q, k, v, 0.3, mask)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q[:5].transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1), attn_mask=mask[:5], scale=0.3).transpose(0, 1)
    torch.testing.assert_close(o[:5], sdpa, atol=1e-5, rtol=1e-5)
    scores = torch.einsum("qhd,khd->qhk", q, kk) * 0.3
    torch.testing.assert_close(lse[:5], torch.logsumexp(scores[:5].masked_fill(~mask[:5, None], -math.inf), -1))
    assert (o[5] == 0).all() and torch.isinf(lse[5]).all() and (lse[5] < 0).all()


def test_merge_states_ref_is_attention_over_the_union():
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(5, 4, 16, generator=gen)
    k, v = torch.randn(20, 4, 16, generator=gen), torch.randn(20, 4, 16, generator=gen)
    full = attention_with_lse_ref(q, k, v, 0.25)
    head, tail = attention_with_lse_ref(q, k[:7], v[:7], 0.25), attention_with_lse_ref(q, k[7:], v[7:], 0.25)
    o, lse = merge_states_ref(*head, *tail)
    torch.testing.assert_close(o, full[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, full[1], atol=1e-5, rtol=1e-5)
    empty = attention_with_lse_ref(q, k[:0], v[:0], 0.25)
    o2, lse2 = merge_states_ref(*full, *empty)  # merging with no keys changes nothing
    torch.testing.assert_close(o2, full[0])
    torch.testing.assert_close(lse2, full[1])


def test_per_level_merge_equals_exact_attention():
    case = make_case(3)
    exact = tree_verify_attention_ref(**case)
    torch.testing.assert_close(tree_verify_attention_levels_ref(**case), exact, atol=1e-5, rtol=1e-5)
    # the tree mask matters: a wrong mask gives a different answer
    wrong = dict(case, tree_mask=torch.ones_like(case["tree_mask"]))
    assert (tree_verify_attention_ref(**wrong) - exact).abs().max() > 1e-2


# --- Triton --------------------------------------------------------------------------------------------


def triton_errors(device: str) -> dict[str, list[float]]:
    """Max abs error of each Triton path against the reference: name -> [error, tolerance]."""
    from seer_sglang.kernels.tree_attention import attention_level, merge_states, tree_verify_attention_triton

    out: dict[str, list[float]] = {}
    gen = torch.Generator().manual_seed(4)
    for d in (16, 24):
        q = torch.randn(12, 4, d, generator=gen).to(device)
        k = torch.randn(70, 2, d, generator=gen).to(device)
        v = torch.randn(70, 2, d, generator=gen).to(device)
        qo = torch.tensor([0, 3, 3, 10, 12], device=device)
        kv = torch.tensor([0, 40, 45, 45, 70], device=device)  # segment 2 has no keys
        q_lens, kv_lens = [3, 0, 7, 2], [40, 5, 0, 25]
        mask = torch.cat([torch.rand(a * c, generator=gen) < 0.5 for a, c in zip(q_lens, kv_lens)]).to(device)
        mask[:40] = False  # first query row sees nothing
        mask_indptr = torch.tensor([0, 120, 120, 120], device=device)
        for name, args in (("plain", ()), ("masked", (mask, mask_indptr))):
            o, lse = attention_level(q, k, v, qo, kv, 0.3, *args)
            o_ref, lse_ref = ragged_attention_with_lse_ref(q, k, v, qo, kv, 0.3, *args)
            fin = torch.isfinite(lse_ref)
            assert torch.equal(torch.isfinite(lse), fin), name
            out[f"level_{name}_d{d}_o"] = [float((o.float() - o_ref).abs().max()), 1e-4]
            out[f"level_{name}_d{d}_lse"] = [float((lse[fin] - lse_ref[fin]).abs().max()), 1e-4]
        o_b, lse_b = ragged_attention_with_lse_ref(q, k.flip(0), v.flip(0), qo, kv, 0.3)
        m, ml = merge_states(o_ref.to(device), lse_ref.to(device), o_b.to(device), lse_b.to(device))
        m_ref, ml_ref = merge_states_ref(o_ref, lse_ref, o_b, lse_b)
        fin = torch.isfinite(ml_ref)
        out[f"merge_d{d}_o"] = [float((m.float().cpu() - m_ref.cpu()).abs().max()), 1e-5]
        out[f"merge_d{d}_lse"] = [float((ml.cpu()[fin.cpu()] - ml_ref.cpu()[fin.cpu()]).abs().max()), 1e-5]
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 1e-2 if device == "cpu" else 2e-2)):
        case = make_case(5, dtype=dtype, device=device)
        ref = tree_verify_attention_ref(**case)
        got = tree_verify_attention_triton(**case)
        assert got.dtype == dtype
        out[f"tree_verify_{str(dtype)[6:]}"] = [float((got.float() - ref).abs().max()), tol]
    return out


INTERPRETED = """
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, {tests!r})
import test_kernels
print(json.dumps(test_kernels.triton_errors("cpu")))
"""


def _assert_errors(errors: dict[str, list[float]]) -> None:
    assert len(errors) == 14
    bad = {name: e for name, e in errors.items() if not e[0] <= e[1]}
    assert not bad, bad


def test_triton_kernels_interpreted():
    env = dict(os.environ, TRITON_INTERPRET="1")
    code = INTERPRETED.format(tests=str(Path(__file__).parent))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    _assert_errors(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_triton_kernels_on_gpu():
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET is set: this test is for the compiled kernels")
    _assert_errors(triton_errors("cuda"))


# --- FlashInfer cascade --------------------------------------------------------------------------------


def test_cascade_plan_follows_flashinfer_layout(monkeypatch):
    """The cascade path's page tables, masks and LSE bases, run against a torch model of the documented
    FlashInfer API (the real kernels need a GPU)."""
    monkeypatch.setitem(sys.modules, "flashinfer", torch_flashinfer())
    from seer_sglang.kernels.cascade import CascadeTreeVerify, tree_verify_attention_cascade

    case = make_case(6, dtype=torch.float16)
    ref = tree_verify_attention_ref(**case)
    verifier = CascadeTreeVerify(device="cpu", workspace_bytes=16)
    got = tree_verify_attention_cascade(**case, verifier=verifier)
    assert got.dtype == torch.float16 and not torch.isnan(got).any()
    assert float((got.float() - ref).abs().max()) < 5e-3
    # natural-log LSE out: a row's LSE over all its keys
    b, t, hq, d = case["q"].shape
    _, lse = verifier.run(case["q"].reshape(b * t, hq, d), *_joint_cache(case))
    r, i = 3, 2  # request 3 = group 2 (prefix rows 23:35), own rows 10:26
    lvl0, lvl1 = case["levels"]
    keys = torch.cat([lvl0.k[23:35], lvl1.k[10:26], case["k_tree"][r][case["tree_mask"][r, i]]]).float()
    qq = case["q"][r, i].float()
    direct = torch.logsumexp(torch.einsum("hd,khd->hk", qq, keys.repeat_interleave(2, 1)) * case["sm_scale"], -1)
    torch.testing.assert_close(lse[r * t + i], direct, atol=2e-3, rtol=1e-3)


def _joint_cache(case):
    ks = [lvl.k for lvl in case["levels"]] + [case["k_tree"].flatten(0, 1)]
    vs = [lvl.v for lvl in case["levels"]] + [case["v_tree"].flatten(0, 1)]
    return torch.cat(ks).unsqueeze(1), torch.cat(vs).unsqueeze(1)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_cascade_on_gpu_matches_reference():
    pytest.importorskip("flashinfer")
    from seer_sglang.kernels.cascade import tree_verify_attention_cascade

    for hq, hk, d in ((4, 2, 64), (8, 8, 128)):
        case = make_case(7, dtype=torch.bfloat16, device="cuda", hq=hq, hk=hk, d=d, t=8)
        ref = tree_verify_attention_ref(**case)
        got = tree_verify_attention_cascade(**case)
        assert float((got.float() - ref).abs().max()) < 3e-2
