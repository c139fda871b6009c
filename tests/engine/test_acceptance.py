"""Lossless acceptance: greedy equals plain greedy decoding, tree sampling keeps the target
distribution (chi-square against exact probabilities, with power checks), and the SGLang-layout
twins match SGLang's own kernels."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from seer_sglang.speculative.acceptance import (greedy_accept, pack_drafts, parents_from_retrive, process_probs,
                                         retrive_from_parents, sample_accept,
                                         tree_speculative_sampling_target_only_torch, tree_structure,
                                         verify_tree_greedy_torch)

@pytest.fixture(autouse=True)
def _one_thread():
    """Small batched ops run faster on one thread than on two shared cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- a tiny target model: next-token logits depend on (position, current token) --------------------


def node_depths(parents: torch.Tensor) -> torch.Tensor:
    depth = torch.zeros_like(parents)
    for i in range(1, parents.shape[1]):
        depth[:, i] = depth.gather(1, parents[:, i:i + 1].clamp(min=0)).squeeze(1) + 1
    return depth


def tree_logits(tables: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
    """Target logits at every node: tables[depth(node), token(node)]."""
    return tables[node_depths(parents), tokens]


def random_parents(gen: torch.Generator, b: int, m: int) -> torch.Tensor:
    parents = torch.full((b, m), -1, dtype=torch.long)
    for i in range(1, m):
        parents[:, i] = (torch.rand(b, generator=gen) * i).long()
    return parents


def random_tree_case(gen: torch.Generator, b: int, m: int, v: int, scale: float):
    """Random trees of ``m`` draft nodes over a vocabulary of ``v``, with the target logits of a
    random transition-table model at every node; drawn in a fixed order from ``gen``."""
    tables = torch.randn(m + 1, v, v, generator=gen) * scale
    parents = random_parents(gen, b, m)
    tokens = torch.randint(0, v, (b, m), generator=gen)
    return tokens, parents, tree_logits(tables, tokens, parents)


def test_tree_structure_depths_padding_and_cycles():
    parents = torch.tensor([[-1, 0, 0, 1, 3, -1, 5], [-1, 0, 3, 2, 1, 4, 5]])
    valid, depth = tree_structure(parents)
    assert valid.tolist() == [[True] * 5 + [False, False], [True, True, False, False, True, True, True]]
    assert depth[0, :5].tolist() == [0, 1, 1, 2, 3]
    assert depth[1, [0, 1, 4, 5, 6]].tolist() == [0, 1, 2, 3, 4]
    assert tree_structure(parents, max_depth=2)[0][0].tolist() == [True] * 4 + [False] * 3


def test_pack_drafts_shifts_under_the_root():
    class D:  # the drafters' Draft shape: tokens, parents (-1 = child of the root), scores
        def __init__(self, tokens, parents):
            self.tokens, self.parents, self.scores = tokens, parents, [1.0] * len(tokens)

    tokens, parents = pack_drafts([7, 9], [D([1, 2, 3], [-1, 0, -1]), D([], [])])
    assert tokens.tolist() == [[7, 1, 2, 3], [9, 0, 0, 0]]
    assert parents.tolist() == [[-1, 0, 1, 0], [-1, -1, -1, -1]]
    assert tree_structure(parents)[0].tolist() == [[True] * 4, [True, False, False, False]]
    assert pack_drafts([7], [D([1], [-1])], num_nodes=5)[0].shape == (1, 5)


# --- greedy -----------------------------------------------------------------------------------------


def test_greedy_equals_plain_greedy_decoding():
    gen = torch.Generator().manual_seed(1)
    b, m, v, dmax = 256, 10, 12, 10
    tables = torch.randn(dmax + 2, v, v, generator=gen) * 3
    parents = random_parents(gen, b, m)
    parents[: b // 4, -2:] = -1  # padding nodes
    depth = node_depths(parents)
    tokens = torch.randint(0, v, (b, m), generator=gen)
    for i in range(1, m):  # most nodes continue their parent greedily, so long paths get accepted
        par = parents[:, i].clamp(min=0)
        greedy_next = tables[depth[:, i] - 1, tokens.gather(1, par[:, None]).squeeze(1)].argmax(-1)
        tokens[:, i] = torch.where(torch.rand(b, generator=gen) < 0.7, greedy_next, tokens[:, i])

    res = greedy_accept(tokens, parents, tree_logits(tables, tokens, parents))
    lengths = []
    for r in range(b):
        seq = [int(tokens[r, 0])]
        for d in range(dmax + 1):  # plain greedy decoding
            seq.append(int(tables[d, seq[-1]].argmax()))
        node, acc = 0, 0
        while True:  # the longest tree path that matches it
            kids = [i for i in range(1, m) if parents[r, i] == node and not (r < b // 4 and i >= m - 2)]
            hit = [i for i in kids if tokens[r, i] == seq[acc + 1]]
            if not hit:
                break
            node, acc = hit[0], acc + 1
        lengths.append(acc)
        assert int(res.num_accepted[r]) == acc
        assert res.tokens[r, : acc + 1].tolist() == seq[1: acc + 2]
        assert (res.tokens[r, acc + 1:] == -1).all()
        assert res.path[r, acc] == node and res.path[r, 0] == 0
    assert max(lengths) >= 4 and min(lengths) == 0  # the batch exercised long and empty acceptances


def test_greedy_logprobs_and_max_depth():
    gen = torch.Generator().manual_seed(2)
    tables = torch.randn(9, 6, 6, generator=gen)
    tokens = torch.zeros(1, 5, dtype=torch.long)
    for i in range(1, 5):  # a linear draft equal to the greedy continuation: all accepted
        tokens[0, i] = tables[i - 1, tokens[0, i - 1]].argmax()
    parents = torch.tensor([[-1, 0, 1, 2, 3]])
    logits = tree_logits(tables, tokens, parents)
    res = greedy_accept(tokens, parents, logits)
    assert res.num_accepted.tolist() == [4] and res.accept_lens.tolist() == [5]
    expected = torch.log_softmax(logits[0], -1).gather(1, res.tokens[0][:, None]).squeeze(1)
    torch.testing.assert_close(res.logprobs[0], expected)
    capped = greedy_accept(tokens, parents, logits, max_depth=2)
    assert capped.num_accepted.tolist() == [2] and capped.tokens.shape[1] == 3
    assert capped.tokens[0].tolist() == res.tokens[0, :3].tolist()


def test_sample_accept_greedy_rows_match_greedy_accept():
    gen = torch.Generator().manual_seed(3)
    b = 64
    tokens, parents, logits = random_tree_case(gen, b, m=8, v=10, scale=4.0)
    temps = torch.where(torch.arange(b) % 2 == 0, 0.0, 1.0)
    res = sample_accept(tokens, parents, logits, temperature=temps, top_p=0.9, generator=gen)
    ref = greedy_accept(tokens, parents, logits)
    assert torch.equal(res.tokens[::2], ref.tokens[::2])
    assert torch.equal(res.num_accepted[::2], ref.num_accepted[::2])


# --- target processing and logprobs ------------------------------------------------------------------


def test_process_probs_matches_sglang_torch_sampler_rules():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    ex = torch.tensor([[0.625, 0.375, 0.0]])
    torch.testing.assert_close(process_probs(logits, 1.0, top_k=2), ex)
    # top-p judged on the unfiltered probs (joint with top-k): mass before token 1 is 0.5 <= 0.6
    torch.testing.assert_close(process_probs(logits, 1.0, top_k=2, top_p=0.6), ex)
    torch.testing.assert_close(process_probs(logits, 1.0, top_p=0.45), torch.tensor([[1.0, 0.0, 0.0]]))
    torch.testing.assert_close(process_probs(logits, 1.0, min_p=0.5), ex)
    torch.testing.assert_close(process_probs(logits, 1.0, top_k=-1), torch.tensor([[0.5, 0.3, 0.2]]))
    torch.testing.assert_close(process_probs(logits, 0.0), torch.tensor([[1.0, 0.0, 0.0]]))
    torch.testing.assert_close(process_probs(logits, 2.0), torch.softmax(logits / 2, -1))
    per_row = process_probs(logits.expand(2, 3), torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(per_row, torch.tensor([[0.5, 0.3, 0.2], [1.0, 0.0, 0.0]]))


def test_sample_logprobs_follow_sglang_conventions():
    gen = torch.Generator().manual_seed(4)
    b = 16
    tokens, parents, logits = random_tree_case(gen, b, m=6, v=9, scale=2.0)
    res = sample_accept(tokens, parents, logits, temperature=0.7, top_k=5, generator=gen)
    probs = process_probs(logits, 0.7, top_k=5)
    for r in range(b):
        for d in range(int(res.num_accepted[r]) + 1):
            node, tok = int(res.path[r, d]), int(res.tokens[r, d])
            assert probs[r, node, tok] > 0  # every emitted token is in the filtered support
            scaled = torch.log_softmax(logits[r, node] / 0.7, -1)[tok]
            assert res.logprobs[r, d] == pytest.approx(float(scaled), abs=1e-5)
            assert res.raw_logprobs[r, d] == pytest.approx(float(torch.log_softmax(logits[r, node], -1)[tok]), abs=1e-5)
            assert res.processed_logprobs[r, d] == pytest.approx(float(torch.log(probs[r, node, tok])), abs=1e-5)


# --- losslessness: chi-square of the first three emitted tokens against exact probabilities ----------

N_DRAWS = 12_000
V = 8
LINEAR = ([-1, 0, 1, 2], "linear")
TREE = ([-1, 0, 0, 0, 1, 1, 4], "tree")  # 3 children at the root, 2 under node 1, depth 3


def _draft(parents: list[int], probs: torch.Tensor, x0: int) -> torch.Tensor:
    """Deterministic draft: each node's children are its parent's most likely tokens."""
    tokens = [x0]
    depth = [0]
    rank = {}
    for i, p in enumerate(parents[1:], start=1):
        rank[p] = rank.get(p, -1) + 1
        depth.append(depth[p] + 1)
        tokens.append(int(probs[depth[p], tokens[p]].argsort(descending=True)[rank[p]]))
    return torch.tensor(tokens)


def _chi2_first3(parents_list: list[int], temperature: float, top_k=None, top_p=None, *, seed: int,
                 coins_zero: bool = False, sglang_op_threshold: float | None = None) -> float:
    gen = torch.Generator().manual_seed(seed)
    tables = torch.randn(4, V, V, generator=gen) * 1.5
    probs = process_probs(tables, temperature, top_k, top_p)  # [depth, token, next]
    x0 = 3
    parents = torch.tensor([parents_list])
    tokens = _draft(parents_list, probs, x0)[None]
    logits = tree_logits(tables, tokens, parents)
    n, m = N_DRAWS, len(parents_list)
    tok_b, par_b, log_b = tokens.expand(n, m), parents.expand(n, m), logits.expand(n, m, V)
    coins = torch.zeros(n, m) if coins_zero else torch.rand(n, m, generator=gen)
    final = torch.rand(n, generator=gen)
    if sglang_op_threshold is None:
        seq = sample_accept(tok_b, par_b, log_b, temperature, top_k, top_p, coins=coins, final_coins=final).tokens
    else:  # the SGLang-layout op on the same tree
        ri, rt, rs = retrive_from_parents(par_b)
        s = int(node_depths(parents).max()) + 1
        predicts = torch.full((n * m,), -1, dtype=torch.int32)
        accept_index = torch.full((n, s), -1, dtype=torch.int32)
        num = torch.zeros(n, dtype=torch.int32)
        tp = process_probs(log_b, temperature, top_k, top_p)
        tree_speculative_sampling_target_only_torch(predicts, accept_index, num, tok_b, ri, rt, rs, coins, final, tp,
                                                    torch.zeros_like(tp), threshold_acc=sglang_op_threshold)
        seq = torch.full((n, s), -1, dtype=torch.long)
        used = accept_index >= 0
        seq[used] = predicts[accept_index[used].long()].long()
    seq = seq[:, :3].clone()
    for d in range(3):  # continue without speculation where fewer than three tokens came out
        prev = torch.full((n,), x0) if d == 0 else seq[:, d - 1]
        draw = torch.multinomial(probs[d, prev], 1, generator=gen).squeeze(1)
        seq[:, d] = torch.where(seq[:, d] < 0, draw, seq[:, d])

    exact = (probs[0, x0][:, None, None] * probs[1][:, :, None] * probs[2][None, :, :]).double().flatten()
    counts = torch.bincount(seq[:, 0] * V * V + seq[:, 1] * V + seq[:, 2], minlength=V ** 3).double()
    expected = exact / exact.sum() * n
    assert counts[expected == 0].sum() == 0, "a token outside the filtered support came out"
    big = expected >= 5
    obs = np.append(counts[big].numpy(), counts[~big].sum().item())
    exp = np.append(expected[big].numpy(), expected[~big].sum().item())
    keep = exp > 0
    return float(chisquare(obs[keep], exp[keep]).pvalue)


@pytest.mark.parametrize("shape", [LINEAR, TREE], ids=lambda s: s[1])
@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, None, None), (0.7, 4, None), (1.0, None, 0.8),
                                                     (1.3, 5, 0.9)])
def test_sampling_is_lossless(shape, temperature, top_k, top_p):
    p = _chi2_first3(shape[0], temperature, top_k, top_p, seed=11)
    assert p > 1e-3, p


def test_sglang_layout_op_is_lossless_on_a_tree():
    assert _chi2_first3(TREE[0], 1.0, seed=12, sglang_op_threshold=1.0) > 1e-3


@pytest.mark.parametrize("shape", [LINEAR, TREE], ids=lambda s: s[1])
def test_chi2_rejects_always_accepting(shape):
    assert _chi2_first3(shape[0], 1.0, seed=13, coins_zero=True) < 1e-3


def test_chi2_rejects_relaxed_acceptance_threshold():
    assert _chi2_first3(TREE[0], 1.0, seed=14, sglang_op_threshold=0.5) < 1e-3


# --- SGLang verify-op layout ---------------------------------------------------------------------------


def test_retrive_links_round_trip():
    gen = torch.Generator().manual_seed(5)
    parents = random_parents(gen, 32, 9)
    parents[:4, -1] = -1
    ri, rt, rs = retrive_from_parents(parents)
    assert ri[1].tolist() == list(range(9, 18))
    back = parents_from_retrive(rt, rs)
    assert torch.equal(back, parents)
    for r in range(32):  # first child is the smallest index, siblings ascend
        for p in range(9):
            kids = [i for i in range(1, 9) if parents[r, i] == p]
            chain, c = [], int(rt[r, p])
            while c != -1:
                chain.append(c)
                c = int(rs[r, c])
            assert chain == kids


def _kernel_port_sampling(cand, ri, rt, rs, coins, final, tp, dp, s, th_single=1.0, th_acc=1.0):
    """Line-by-line Python port of SGLang's TreeSpeculativeSamplingTargetOnly CUDA kernel."""
    b, n = cand.shape
    predicts = torch.full((b * n,), -1, dtype=torch.int32)
    acc_idx = torch.full((b, s), -1, dtype=torch.int32)
    num = torch.zeros(b, dtype=torch.int32)
    dp = dp.clone()
    for bx in range(b):
        prob_acc, cur_prob, coin = 0.0, 0, float(coins[bx, 0])
        last = int(ri[bx, 0])
        acc_idx[bx, 0] = last
        n_acc, cur = 0, 0
        for _ in range(1, s):
            cur = int(rt[bx, cur])
            while cur != -1:
                tok = int(cand[bx, cur])
                p = float(tp[bx, cur_prob, tok])
                prob_acc += p
                if p > 0 and (coin < prob_acc / th_acc or p >= th_single):
                    prob_acc, cur_prob, coin = 0.0, cur, float(coins[bx, cur])
                    predicts[last] = tok
                    n_acc += 1
                    acc_idx[bx, n_acc] = int(ri[bx, cur])
                    last = int(ri[bx, cur])
                    break
                dp[bx, cur_prob, tok] = tp[bx, cur_prob, tok]
                cur = int(rs[bx, cur])
            if cur == -1:
                break
        num[bx] = n_acc
        q = tp[bx, cur_prob].double()
        pd = dp[bx, cur_prob].double() if n_acc != s - 1 else torch.zeros_like(q)
        r = (q - pd).clamp(min=0)
        u = float(final[bx]) * float(r.sum())
        cs, sampled = 0.0, -1
        for i in range(r.numel()):
            cs += float(r[i])
            if r[i] > 0 and cs > u:
                sampled = i
                break
        if sampled < 0:
            pos = (r > 0).nonzero()
            sampled = int(pos[-1]) if len(pos) else r.numel() - 1
        predicts[last] = sampled
    return predicts, acc_idx, num


@pytest.mark.parametrize("th_single,th_acc", [(1.0, 1.0), (0.3, 0.6)])
def test_sampling_op_matches_sglang_kernel_logic(th_single, th_acc):
    gen = torch.Generator().manual_seed(6)
    b, n, v, s = 24, 8, 16, 4
    parents = random_parents(gen, b, n)
    tokens = torch.stack([torch.randperm(v, generator=gen)[:n] for _ in range(b)])  # distinct siblings
    logits = torch.randn(b, n, v, generator=gen) * 2
    for i in range(1, n):  # make the children likely under their parent so paths get accepted
        logits[torch.arange(b), parents[:, i], tokens[:, i]] += 3.0
    tp = torch.softmax(logits, -1)
    tp[:, :, 0] = 0.0  # some zero-probability tokens, as after top-k
    tp = tp / tp.sum(-1, keepdim=True)
    dp = torch.zeros_like(tp)
    coins, final = torch.rand(b, n, generator=gen), torch.rand(b, generator=gen)
    ri, rt, rs = retrive_from_parents(parents)

    predicts = torch.full((b * n,), -1, dtype=torch.int32)
    acc_idx = torch.full((b, s), -1, dtype=torch.int32)
    num = torch.zeros(b, dtype=torch.int32)
    tree_speculative_sampling_target_only_torch(predicts, acc_idx, num, tokens, ri, rt, rs, coins, final, tp, dp,
                                                threshold_single=th_single, threshold_acc=th_acc)
    ref_pred, ref_idx, ref_num = _kernel_port_sampling(tokens, ri, rt, rs, coins, final, tp, dp, s, th_single, th_acc)
    assert torch.equal(num, ref_num) and torch.equal(acc_idx, ref_idx)
    used = acc_idx[acc_idx >= 0].long()
    assert torch.equal(predicts[used], ref_pred[used])
    assert num.max() >= 2 and num.min() == 0


def test_greedy_op_matches_greedy_accept():
    gen = torch.Generator().manual_seed(7)
    b, n, v = 32, 8, 6
    parents = random_parents(gen, b, n)
    tokens = torch.randint(0, v, (b, n), generator=gen)
    logits = torch.randn(b, n, v, generator=gen)
    ri, rt, rs = retrive_from_parents(parents)
    s = n
    predicts = torch.zeros(b * n, dtype=torch.int32)
    acc_idx = torch.full((b, s), -1, dtype=torch.int32)
    num = torch.empty(b, dtype=torch.int32)
    verify_tree_greedy_torch(predicts, acc_idx, num, tokens, ri, rt, rs, logits.argmax(-1))
    ref = greedy_accept(tokens, parents, logits)
    assert torch.equal(num.long(), ref.num_accepted)
    for r in range(b):
        k = int(num[r])
        assert acc_idx[r, : k + 1].tolist() == (ref.path[r, : k + 1] + r * n).tolist()
        assert predicts[acc_idx[r, : k + 1].long()].tolist() == ref.tokens[r, : k + 1].tolist()


SGLANG_TRITON_CHECK = r"""
import ast, importlib.util, os, sys, tempfile
os.environ["TRITON_INTERPRET"] = "1"
import torch
from seer_sglang.speculative.acceptance import parents_from_retrive, verify_tree_greedy_torch

# Load SGLang's Triton tree kernels from its source file without importing the sglang package.
sgl_root = importlib.util.find_spec("sglang").submodule_search_locations[0]
src_path = os.path.join(sgl_root, "kernels", "ops", "speculative", "spec_tree.py")
tree = ast.parse(open(src_path).read())
keep = {"TreeMaskMode", "sgl_build_tree_kernel_efficient_triton", "verify_tree_greedy_kernel_triton",
        "sgl_build_tree_kernel_triton", "verify_tree_greedy_triton"}
body = [n for n in tree.body if getattr(n, "name", None) in keep]
lines = open(src_path).read().splitlines()
header = "from enum import IntEnum\nimport torch\nimport triton\nimport triton.language as tl\n"
chunks = ["\n".join(lines[min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])]) - 1:n.end_lineno])
          for n in body]
mod_file = os.path.join(tempfile.mkdtemp(), "sgl_spec_tree_kernels.py")
open(mod_file, "w").write(header + "\n\n\n".join(chunks))
spec = importlib.util.spec_from_file_location("sgl_spec_tree_kernels", mod_file)
sk = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sk)

torch.manual_seed(0)
bs, topk, steps, n = 6, 2, 4, 8
# An EAGLE draft: step 0 gives the root topk children; each later step expands the topk best paths.
scores, parents_list, cum = [torch.rand(bs, topk)], [torch.arange(-1, topk).expand(bs, -1)], None
cum = scores[0]
for i in range(1, steps):
    flat = (cum.unsqueeze(2) * torch.rand(bs, topk, topk)).flatten(1)
    cs_p, cs_idx = flat.topk(topk, dim=-1)
    scores.append(flat)
    parents_list.append(cs_idx + (topk * topk * (i - 1) + topk))
    cum = cs_p
top = torch.topk(torch.cat(scores, 1), n - 1, dim=-1).indices.sort().values
parent_list = torch.cat(parents_list[:-1], 1)
mask = torch.full((n * n * bs,), True)
positions = torch.empty(bs * n, dtype=torch.long)
ri, rt, rs = torch.full((3, bs, n), -1, dtype=torch.long)
sk.sgl_build_tree_kernel_triton(parent_list, top, torch.tensor([5] * bs), mask, positions, ri, rt, rs, topk, steps, n,
                                sk.TreeMaskMode.QLEN_ONLY)

parents = parents_from_retrive(rt, rs)
anc = torch.eye(n, dtype=torch.bool).expand(bs, n, n).clone()
for i in range(1, n):
    p = parents[:, i]
    anc[:, i] |= anc[torch.arange(bs), p.clamp(min=0)] & (p >= 0)[:, None]
assert torch.equal(anc, mask.view(bs, n, n)), "tree from retrive links differs from SGLang's tree mask"

cand = torch.randint(0, 5, (bs, n))
target = torch.randint(0, 5, (bs, n))
for i in range(1, n):  # let most children match their parent's prediction
    hit = torch.rand(bs) < 0.7
    target[hit, parents[hit, i].clamp(min=0)] = cand[hit, i]
for depth in (steps + 1, 3):
    outs = []
    for fn in (sk.verify_tree_greedy_triton, verify_tree_greedy_torch):
        pred = torch.full((bs * n,), -7, dtype=torch.int64)
        idx = torch.full((bs, depth), -1, dtype=torch.int64)
        num = torch.full((bs,), -1, dtype=torch.int64)
        fn(pred, idx, num, cand, ri, rt, rs, target)
        outs.append((pred, idx, num))
    (p1, i1, n1), (p2, i2, n2) = outs
    assert torch.equal(n1, n2), (n1, n2)
    assert torch.equal(i1, i2), (i1, i2)
    used = i1[i1 >= 0]
    assert torch.equal(p1[used], p2[used]), (p1, p2)
    assert int(n1.max()) >= 2

# The NGRAM worker derives the same links from its tree mask (its helper, loaded from source as well).
ngram_src = open(os.path.join(sgl_root, "srt", "speculative", "ngram_worker.py")).read()
fn = next(n for n in ast.parse(ngram_src).body if getattr(n, "name", None) == "_derive_tree_links")
import numpy as np
scope = {"np": np, "torch": torch}
exec(ast.get_source_segment(ngram_src, fn), scope)
from seer_sglang.speculative.acceptance import retrive_from_parents
rand_parents = torch.full((16, 9), -1, dtype=torch.long)
for i in range(1, 9):
    rand_parents[:, i] = torch.randint(0, i, (16,))
anc = torch.eye(9, dtype=torch.bool).expand(16, 9, 9).clone()
for i in range(1, 9):
    anc[:, i] |= anc[torch.arange(16), rand_parents[:, i]]
nt, ns = scope["_derive_tree_links"](anc.numpy(), 16, 9)
_, my_nt, my_ns = retrive_from_parents(rand_parents)
assert torch.equal(nt, my_nt) and torch.equal(ns, my_ns), "links differ from the NGRAM worker's"
print("identical")
"""


def test_matches_sglang_triton_tree_kernels():
    """SGLang's own code: its EAGLE tree builder's links (Triton, interpreted) decode to the tree its mask
    describes, its greedy verify kernel gives the same outputs as the torch twin, and its NGRAM link
    derivation equals ``retrive_from_parents``."""
    out = subprocess.run([sys.executable, "-c", SGLANG_TRITON_CHECK], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("identical")
