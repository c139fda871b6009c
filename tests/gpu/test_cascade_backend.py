"""The ``seer_cascade`` GPU verify backend: its three-level layout over SGLang's KV pool, checked on CPU
against the CPU verify backend's tree attention with a torch model of FlashInfer's kernels, and on a GPU
against the same reference with the real kernels (skipped without one). Only the tests of the backend
class and the engine need SGLang itself."""

from __future__ import annotations

import math
import sys
import types

import pytest
import torch

from conftest import start_healthy
from flashinfer_model import torch_flashinfer
from seer_sglang.config import PluginConfig
from seer_sglang.kernels.cascade import CascadeTreeVerify, cascade_layout, plan_layout, run_cascade_layout, verify_layout
from seer_sglang.kernels.reference import tree_mask_from_parents
from seer_sglang.kernels.sglang_layout import tree_attention, verify_slots

HAS_CUDA = torch.cuda.is_available()
D = 5  # tree nodes per request
HQ, HK, HD = 4, 2, 16

# (group, cached tokens, slots in common with the group's prompt): members of a group are spread over
# the batch. Group 0 shares a 40-token prompt, one member has nothing of its own yet (so the shared
# prefix stops one token short for all); group 1 shares 30 prompt tokens but one member diverged at 25
# (its tail came from elsewhere); group 2 shares 3 tokens (too few to be worth a level); 3 is alone.
REQUESTS = [(0, 52, 40), (1, 41, 30), (2, 9, 3), (0, 40, 40), (3, 17, 0), (1, 33, 25), (0, 47, 40),
            (2, 12, 3), (1, 30, 30)]
PROMPTS = {0: 40, 1: 30, 2: 3, 3: 17}


def kv_pool_case(seed: int, dtype: torch.dtype = torch.float32, device: str = "cpu", hd: int = HD):
    """SGLang-like state: a KV pool, req_to_token rows whose shared prompt slots are the same rows of the
    pool, fresh slots for the rest and for the draft nodes, random trees, queries. A small head dim keeps
    the CPU checks fast; FlashInfer's kernels are built for head dims 64, 128 and 256 only."""
    gen = torch.Generator().manual_seed(seed)
    b, width = len(REQUESTS), max(n for _, n, _ in REQUESTS) + D
    free = iter(torch.randperm(4096, generator=gen).tolist())
    prompts = {g: [next(free) for _ in range(n)] for g, n in PROMPTS.items()}
    req_to_token = torch.zeros(b + 3, width + 8, dtype=torch.int32)
    pool_idx = torch.randperm(b + 3, generator=gen)[:b]
    tree_locs = torch.empty(b, D, dtype=torch.int64)
    for i, (g, n, common) in enumerate(REQUESTS):
        row = prompts[g][:common] + [next(free) for _ in range(n - common)]
        tree_locs[i] = torch.tensor([next(free) for _ in range(D)])
        req_to_token[pool_idx[i], :n + D] = torch.tensor(row + tree_locs[i].tolist(), dtype=torch.int32)
    parents = torch.full((b, D), -1, dtype=torch.long)
    for j in range(1, D):
        parents[:, j] = torch.randint(0, j, (b,), generator=gen)
    tree = tree_mask_from_parents(parents)
    seq_lens = torch.tensor([n for _, n, _ in REQUESTS])
    # SGLang's GPU verify mask: per request [D, prefix + D] rows, the prefix all visible
    custom_mask = torch.cat([torch.cat([torch.ones(D, n, dtype=torch.bool), tree[i]], 1).reshape(-1)
                             for i, n in enumerate(seq_lens.tolist())])
    k_cache = torch.randn(4096, HK, hd, generator=gen).to(dtype)
    v_cache = torch.randn(4096, HK, hd, generator=gen).to(dtype)
    q = torch.randn(b, D, HQ, hd, generator=gen).to(dtype)
    out = dict(req_to_token=req_to_token, pool_idx=pool_idx, seq_lens=seq_lens, tree_locs=tree_locs, tree=tree,
               custom_mask=custom_mask, k_cache=k_cache, v_cache=v_cache, q=q)
    return {k: v.to(device) for k, v in out.items()}


def reference(case) -> torch.Tensor:
    """The CPU verify backend's attention (every request's prefix read alone), in float32."""
    slots = verify_slots(case["req_to_token"], case["pool_idx"], case["seq_lens"], case["tree_locs"])
    return tree_attention(case["q"].float(), case["k_cache"].float(), case["v_cache"].float(), slots,
                          case["seq_lens"], case["tree"], 1 / math.sqrt(case["q"].shape[-1]), True)


def test_layout_shares_each_groups_common_prompt_once():
    case = kv_pool_case(0)
    layout = verify_layout(case["req_to_token"], case["pool_idx"], case["seq_lens"], case["seq_lens"].tolist(),
                         case["tree_locs"], case["custom_mask"], min_shared=4)
    order = layout.order.tolist()
    groups = [REQUESTS[i][0] for i in order]
    # sharing groups first, members contiguous and in batch order; then the rest, by group
    assert groups == [0, 0, 0, 1, 1, 1, 2, 2, 3] and order[:6] == [0, 3, 6, 1, 5, 8]
    # group 0: 40 common slots, capped at 39 so the member with 40 tokens keeps one; group 1: 25
    shared = layout.shared
    assert shared.qo_indptr.tolist() == [0, 3 * D, 6 * D] and shared.kv_indptr.tolist() == [0, 39, 64]
    rows = case["req_to_token"][case["pool_idx"]]
    assert shared.kv_indices[:39].tolist() == rows[0, :39].tolist()
    assert shared.kv_indices[39:].tolist() == rows[1, :25].tolist()
    own_lens = (layout.own.kv_indptr[1:] - layout.own.kv_indptr[:-1]).tolist()
    expect = [REQUESTS[i][1] - {0: 39, 1: 25}.get(REQUESTS[i][0], 0) for i in order]
    assert own_lens == expect and min(own_lens) >= 1  # no empty segment anywhere
    assert layout.shared_slots == 64 and layout.saved_slots == 39 * 2 + 25 * 2
    # the own level's slots are each request's own, after the shared part
    first = order.index(3)
    start = int(layout.own.kv_indptr[first])
    assert layout.own.kv_indices[start:start + 1].tolist() == rows[3, 39:40].tolist()
    assert layout.tree.kv_indices.view(-1, D).tolist() == case["tree_locs"][layout.order].tolist()
    # a batch without siblings has nothing to share: FlashInfer's own verify runs
    start = sum((n + D) * D for _, n, _ in REQUESTS[:4])
    alone = verify_layout(case["req_to_token"], case["pool_idx"][4:5], case["seq_lens"][4:5], [17],
                        case["tree_locs"][4:5], case["custom_mask"][start:start + (17 + D) * D])
    assert alone is None


def test_rollout_groups_share_their_prompt_past_a_common_chat_template():
    """Prompts that only share a chat template: by first slot they make one group sharing the template;
    with the rollout's group ids (what the SEER worker tags) each group shares its whole prompt."""
    template, prompt, own = list(range(6)), {0: list(range(100, 130)), 1: list(range(200, 230))}, 5
    groups = [0, 1, 0, 1]
    rows = torch.tensor([template + prompt[g] + [300 + 10 * i + j for j in range(own)] for i, g in enumerate(groups)])
    seq = torch.full((4,), rows.shape[1])
    tree_slots = torch.arange(400, 400 + 4 * D).view(4, D)
    tree = tree_mask_from_parents(torch.tensor([[-1, 0, 0, 1, 2]] * 4))
    by_slot = cascade_layout(rows, seq, tree_slots, tree, 4)
    assert by_slot.shared.kv_indptr.tolist() == [0, 6] and by_slot.saved_slots == 6 * 3
    by_group = cascade_layout(rows, seq, tree_slots, tree, 4, torch.tensor(groups))
    assert by_group.shared.kv_indptr.tolist() == [0, 36, 72] and by_group.order.tolist() == [0, 2, 1, 3]
    assert by_group.shared.kv_indices[36:].tolist() == template + prompt[1]
    assert by_group.saved_slots == 36 * 2
    # a group id over requests with different KV shares nothing it does not have
    mixed = cascade_layout(rows, seq, tree_slots, tree, 4, torch.tensor([0, 0, 1, 1]))
    assert mixed.shared.kv_indptr.tolist() == [0, 6, 12]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cascade_over_the_kv_pool_equals_the_cpu_verify(monkeypatch, seed):
    """Three levels merged by LSE give the CPU verify backend's attention (torch model of the kernels)."""
    monkeypatch.setitem(sys.modules, "flashinfer", torch_flashinfer())
    case = kv_pool_case(seed)
    layout = verify_layout(case["req_to_token"], case["pool_idx"], case["seq_lens"], case["seq_lens"].tolist(),
                         case["tree_locs"], case["custom_mask"], min_shared=4)
    verifier = CascadeTreeVerify(device="cpu", workspace_bytes=16)
    plan_layout(verifier, layout, HQ, HK, HD, 1 / math.sqrt(HD), torch.float32, torch.float32)
    got = run_cascade_layout(verifier, layout, case["q"].reshape(-1, HQ, HD), case["k_cache"].unsqueeze(1),
                             case["v_cache"].unsqueeze(1))
    torch.testing.assert_close(got.view(len(REQUESTS), D, HQ, HD), reference(case), atol=1e-5, rtol=1e-5)


class _Pool:
    """The two calls the backend makes on SGLang's KV pool."""

    def __init__(self, k, v):
        self.k, self.v, self.writes = k, v, []

    def set_kv_buffer(self, layer, loc, k, v, k_scale=None, v_scale=None):
        self.writes.append(loc.loc.clone())
        self.k[loc.loc] = k.view(-1, HK, HD)
        self.v[loc.loc] = v.view(-1, HK, HD)

    def get_kv_buffer(self, layer_id):
        return self.k, self.v


def test_backend_verify_step_writes_draft_kv_and_plans_once(monkeypatch):
    """The backend's verify step outside the GPU: it writes the draft nodes' KV, plans on its first layer
    only, and returns the reference attention in SGLang's [tokens, heads * dim] layout."""
    pytest.importorskip("sglang")
    from seer_sglang.plugin.cascade_backend import SeerCascadeAttnBackend  # SGLang looks for the real one

    monkeypatch.setitem(sys.modules, "flashinfer", torch_flashinfer())

    case = kv_pool_case(3)
    b = len(REQUESTS)
    k_new, v_new = torch.randn(b * D, HK * HD), torch.randn(b * D, HK * HD)
    backend = object.__new__(SeerCascadeAttnBackend)  # no GPU here: only the state the verify step uses
    backend.verifier = CascadeTreeVerify(device="cpu", workspace_bytes=16)
    backend.req_to_token_pool = types.SimpleNamespace(req_to_token=case["req_to_token"])
    backend.token_to_kv_pool = _Pool(case["k_cache"].clone(), case["v_cache"].clone())
    backend.use_sliding_window_kv_pool, backend.page_size = False, 1
    backend.saved_slots = backend.read_slots = backend.cascade_steps = 0
    backend._next_log = 0.0
    backend._layout = backend._planned = None
    backend._kv_write_scales = lambda layer: (None, None)
    spec = types.SimpleNamespace(custom_mask=case["custom_mask"], draft_token_num=D)
    mode = types.SimpleNamespace(is_target_verify=lambda: True)
    batch = types.SimpleNamespace(spec_info=spec, forward_mode=mode, batch_size=b, seq_lens=case["seq_lens"],
                                  seq_lens_cpu=case["seq_lens"], req_pool_indices=case["pool_idx"],
                                  out_cache_loc=case["tree_locs"].reshape(-1), out_cache_loc_is_physical=False)
    backend._layout = backend._layout_of(batch)
    assert backend._layout is not None and backend.saved_slots > 0 and backend.cascade_steps == 1
    layer = types.SimpleNamespace(layer_id=0, tp_q_head_num=HQ, tp_k_head_num=HK, head_dim=HD, v_head_dim=HD,
                                  scaling=1 / math.sqrt(HD), is_cross_attention=False, logit_cap=0.0,
                                  sliding_window_size=-1)
    plans = []
    original = backend.verifier.plan
    monkeypatch.setattr(backend.verifier, "plan", lambda *a, **k: (plans.append(1), original(*a, **k)))
    outs = [backend.forward_extend(case["q"].reshape(b * D, -1), k_new, v_new, layer, batch) for _ in range(2)]
    assert len(plans) == 1 and len(backend.token_to_kv_pool.writes) == 2
    case["k_cache"][case["tree_locs"].reshape(-1)] = k_new.view(-1, HK, HD)
    case["v_cache"][case["tree_locs"].reshape(-1)] = v_new.view(-1, HK, HD)
    expect = reference(case).reshape(b * D, HQ * HD)
    for out in outs:
        torch.testing.assert_close(out, expect, atol=1e-5, rtol=1e-5)


def test_plugin_registers_both_verify_backends():
    """SGLang's --attention-backend accepts seer_cascade, and its factory refuses a machine without a GPU
    with a message that names the CPU backend."""
    pytest.importorskip("sglang")
    from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    from seer_sglang.plugin.spec_registry import register_spec

    register_spec()
    assert {"seer_verify", "seer_cascade"} <= set(ATTENTION_BACKEND_CHOICES)
    assert {"seer_verify", "seer_cascade"} <= set(ATTENTION_BACKENDS)
    if not HAS_CUDA:
        with pytest.raises(RuntimeError, match="seer_verify"):
            ATTENTION_BACKENDS["seer_cascade"](types.SimpleNamespace(device="cpu"))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_cascade_over_the_kv_pool_on_gpu_matches_reference():
    pytest.importorskip("flashinfer")
    hd = 64
    for seed in range(3):
        case = kv_pool_case(seed, torch.bfloat16, "cuda", hd)
        layout = cascade_layout(case["req_to_token"][case["pool_idx"].long()], case["seq_lens"], case["tree_locs"],
                                case["tree"], 4)
        verifier = CascadeTreeVerify("cuda")
        plan_layout(verifier, layout, HQ, HK, hd, 1 / math.sqrt(hd), torch.bfloat16, torch.bfloat16)
        got = run_cascade_layout(verifier, layout, case["q"].reshape(-1, HQ, hd), case["k_cache"].unsqueeze(1),
                                 case["v_cache"].unsqueeze(1))
        ref = reference(case).reshape(got.shape)
        assert float((got.float() - ref).abs().max()) < 3e-2


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
def test_seer_cascade_keeps_the_tokens_of_flashinfers_verify_on_gpu(tmp_path):
    """Real engine (SmolLM2, fp16, CUDA graphs off so every verify step is eager): SEER verifying through
    the cascade gives the greedy tokens of SEER verifying through FlashInfer's own backend, for 8
    siblings of 4 prompts that share their prompts through the radix cache, and the cascade ran."""
    pytest.importorskip("sglang")
    import httpx

    from seer_sglang.launch.instances import InstanceSpec, free_port, stop_instances, visible_gpus
    from seer_sglang.models import prepare

    model = str(prepare("smollm2"))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    texts = [f"Question {i}: a farmer has {i + 12} apples and buys {3 * i + 5} more each day for {i + 2} days. "
             "How many apples does the farmer have at the end? Think step by step." for i in range(4)]
    prompts = [tok(t)["input_ids"] for t in texts]
    rids = [f"g{p}-{j}-c0" for p in range(4) for j in range(8)]
    outs = {}
    for backend in ("flashinfer", "seer_cascade"):
        log = tmp_path / f"{backend}.log"
        inst = start_healthy(InstanceSpec(
            model_path=model, port=free_port(), cpu=False, gpus=visible_gpus()[0], log_path=log,
            sglang_args=["--dtype", "float16", "--disable-cuda-graph", "--mem-fraction-static", "0.3",
                         "--speculative-algorithm", "SEER", "--attention-backend", backend,
                         "--speculative-num-draft-tokens", "8", "--speculative-ngram-max-bfs-breadth", "4"],
            extra_env=PluginConfig(budget="full").to_env()))
        try:
            body = {"input_ids": [prompts[int(r[1])] for r in rids], "rid": rids,
                    "sampling_params": {"temperature": 0, "max_new_tokens": 64}}
            r = httpx.post(f"{inst.url}/generate", json=body, timeout=600)
            assert r.status_code == 200, r.text
            outs[backend] = [o["output_ids"] for o in r.json()]
        finally:
            stop_instances([inst])
        if backend == "seer_cascade":
            assert "cascade verify" in log.read_text()
    assert outs["seer_cascade"] == outs["flashinfer"]
