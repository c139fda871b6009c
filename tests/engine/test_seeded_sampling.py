"""The CPU twin of SGLang's seeded-sampling hash is bit-identical to the Triton kernel."""

import subprocess
import sys

CODE = """
import os
os.environ["TRITON_INTERPRET"] = "1"  # run the Triton kernel on CPU tensors
import torch
from sglang.kernels.ops.sampling import murmur_hash as mh
from seer_sglang.plugin.seeded_sampling import murmur_hash32_torch
seed = torch.tensor([0, 1, 2**62 - 5, -7, 123456789012], dtype=torch.int64)
pos = torch.tensor([0, 5, 4095, 17, 2**31 + 3], dtype=torch.int64)
cols = torch.arange(300)
out = torch.empty((5, 300), dtype=torch.uint32)
mh.murmur_hash32_kernel[(5, 1)](seed, pos, cols, out, 5, 300, BLOCK_SIZE=512)
ref = murmur_hash32_torch(seed, pos, cols)
assert ref.shape == (5, 300) and int(ref.min()) >= 0 and int(ref.max()) < 2**32
assert torch.equal(out.to(torch.int64), ref), (out[:, :4], ref[:, :4])
print("identical")
"""


def test_torch_murmur_hash_matches_triton_kernel():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "identical"


def test_the_seeded_draw_runs_eagerly_on_cpu():
    """SGLang's torch.compile'd seeded draw would compile inside a fresh instance's first sampled step;
    on CPU the hook calls the function it wraps, and leaves other devices to the compiled one."""
    import torch

    from seer_sglang.plugin.seeded_sampling import eager_on_cpu

    calls = []

    def compiled(*args):
        calls.append("compiled")

    def eager(*args):
        calls.append("eager")

    compiled.__wrapped__ = eager
    eager_on_cpu(compiled, torch.zeros(2, 4), torch.zeros(2), torch.zeros(2))
    meta = torch.zeros(2, 4, device="meta")
    eager_on_cpu(compiled, meta, torch.zeros(2), torch.zeros(2))
    assert calls == ["eager", "compiled"]


def test_the_sparse_seeded_draw_is_sglangs_draw():
    """Over the tokens a row can draw only (forced tokens, top-k, top-p), the seeded draw gives the
    token SGLang's dense ``multinomial_with_seed`` gives, row by row, ties and empty rows included."""
    import torch
    from sglang.srt.layers import sampler

    from seer_sglang.plugin import seeded_sampling
    from seer_sglang.plugin.seeded_sampling import murmur_hash32_torch, seeded_draw_sparse

    dense = getattr(sampler.multinomial_with_seed, "__wrapped__", sampler.multinomial_with_seed)
    saved = sampler.murmur_hash32
    sampler.murmur_hash32 = murmur_hash32_torch  # SGLang's CPU hash needs a kernel wheel we lack
    try:
        g = torch.Generator().manual_seed(0)
        n, m = 64, 3000
        logits = torch.randn(n, m, generator=g)
        mask = torch.rand(n, m, generator=g) < 0.97  # about 90 live tokens a row
        logits[mask] = float("-inf")
        logits[0] = float("-inf")
        logits[0, 1234] = 0.0  # forced token
        logits[1] = float("-inf")  # nothing to draw
        logits[2, :] = float("-inf")
        logits[2, [5, 9, 700]] = 0.0  # equal weights
        logprobs = torch.log_softmax(logits, dim=-1)
        logprobs[1] = float("-inf")
        seed = torch.randint(0, 2**62, (n,), generator=g)
        positions = torch.randint(0, 5000, (n,), generator=g)
        sparse = seeded_draw_sparse(logprobs, seed, positions)
        assert sparse is not None and sparse.shape == (n, 1)
        assert torch.equal(sparse, dense(logprobs, seed, positions))
        assert int(sparse[0]) == 1234
        # A full row makes the dense draw cheaper: the sparse one declines, and the hook takes SGLang's.
        full = torch.log_softmax(torch.randn(4, m, generator=g), dim=-1)
        assert seeded_draw_sparse(full, seed[:4], positions[:4]) is None
        assert torch.equal(seeded_sampling.eager_on_cpu(sampler.multinomial_with_seed, full, seed[:4], positions[:4]),
                           dense(full, seed[:4], positions[:4]))
    finally:
        sampler.murmur_hash32 = saved


def test_a_seeded_draw_does_not_depend_on_the_rest_of_its_batch():
    """A temperature-1 row draws the same token alone (SGLang's plain path) as beside a greedy row
    (top-k = 1, which sends the whole batch down the top-k / top-p path); a row with its own cut
    draws only tokens inside it, the same ones whatever its neighbours."""
    import torch
    from sglang.srt.layers import sampler

    from seer_sglang.plugin.seeded_sampling import eager_on_cpu, murmur_hash32_torch, token_keyed_draw

    saved_hash = sampler.murmur_hash32
    sampler.murmur_hash32 = murmur_hash32_torch  # SGLang's CPU hash needs a kernel wheel we lack
    torch.manual_seed(0)
    vocab, rows = 64, 200
    probs = torch.softmax(torch.randn(rows, vocab) * 2, dim=-1)
    seeds = torch.randint(0, 2**62, (rows,), dtype=torch.int64)
    positions = torch.arange(rows, dtype=torch.int64) * 7
    old = sampler.multinomial_with_seed
    draw = lambda *a, **k: eager_on_cpu(old, *a, **k)  # noqa: E731  (as hooked in an instance)
    original = sampler.top_k_top_p_min_p_sampling_from_probs_torch
    with_hooked = lambda p, k, tp, s, pos: token_keyed_draw(original, p, k, tp, torch.zeros(len(p)), False,  # noqa: E731
                                                            s, pos)
    sampler.multinomial_with_seed = draw
    try:
        alone = draw(torch.log(probs), seeds, positions).view(-1)
        greedy = torch.softmax(torch.randn(1, vocab), dim=-1)
        batch = torch.cat([greedy.expand(rows, -1), probs])
        top_ks = torch.cat([torch.ones(rows, dtype=torch.int64), torch.full((rows,), vocab)])
        top_ps = torch.ones(2 * rows)
        both = with_hooked(batch, top_ks, top_ps, torch.cat([seeds, seeds]), torch.cat([positions, positions]))
        assert torch.equal(both[rows:].long(), alone.long())  # the temperature-1 rows: as alone
        assert bool((both[:rows].long() == greedy.argmax()).all())  # the greedy rows: their argmax
        # rows with their own cut (top-k 5, top-p 0.7) draw inside it, alone or in a mixed batch
        cut_k = torch.full((rows,), 5, dtype=torch.int64)
        inside = with_hooked(probs, cut_k, torch.full((rows,), 0.7), seeds, positions).long()
        ranks = probs.argsort(dim=-1, descending=True).argsort(dim=-1)
        assert bool((ranks.gather(1, inside.view(-1, 1)) < 5).all())
        mixed = with_hooked(torch.cat([probs, probs]), torch.cat([cut_k, torch.full((rows,), vocab)]),
                            torch.cat([torch.full((rows,), 0.7), torch.ones(rows)]),
                            torch.cat([seeds, seeds]), torch.cat([positions, positions])).long()
        assert torch.equal(mixed[:rows], inside) and torch.equal(mixed[rows:], alone.long())
        assert not torch.equal(inside, alone.long())  # the cut does change draws
    finally:
        sampler.multinomial_with_seed = old
        sampler.murmur_hash32 = saved_hash


def test_asking_for_the_sampling_support_changes_no_draw():
    """``return_sampling_mask`` makes SGLang's sampler ask for the filtered weights: the hooked draw
    then gives the same tokens as without, and the weights, token order and drawn weights of SGLang's
    own path (its sort of the probabilities, its cut), which SGLang packs into the support."""
    import torch
    from sglang.srt.layers import sampler

    from seer_sglang.plugin.seeded_sampling import eager_on_cpu, murmur_hash32_torch, token_keyed_draw

    saved_hash, old = sampler.murmur_hash32, sampler.multinomial_with_seed
    sampler.murmur_hash32 = murmur_hash32_torch  # SGLang's CPU hash needs a kernel wheel we lack
    sampler.multinomial_with_seed = lambda *a, **k: eager_on_cpu(old, *a, **k)
    original = sampler.top_k_top_p_min_p_sampling_from_probs_torch
    try:
        torch.manual_seed(1)
        rows, vocab = 300, 64
        probs = torch.softmax(torch.randn(rows, vocab) * 2, dim=-1)
        top_ks = torch.randint(1, 12, (rows,))
        top_ps = torch.rand(rows) * 0.6 + 0.4
        seeds = torch.randint(0, 2**62, (rows,), dtype=torch.int64)
        positions = torch.arange(rows, dtype=torch.int64) * 3
        args = (probs, top_ks, top_ps, torch.zeros(rows), False, seeds, positions)
        plain = token_keyed_draw(original, *args)
        ids, weights, order, chosen = token_keyed_draw(original, *args, return_filtered_probs=True)
        _, sglang_weights, sglang_order, _ = original(*args, return_filtered_probs=True)
        assert torch.equal(ids, plain)
        assert torch.equal(weights, sglang_weights) and torch.equal(order, sglang_order)
        support = weights > 0
        assert bool((support.sum(-1) <= top_ks).all())
        drawn = (order == ids.view(-1, 1)) & support  # each drawn token lies in its row's support
        assert bool(drawn.any(-1).all())
        assert torch.equal(chosen, (weights * drawn).sum(-1))
    finally:
        sampler.multinomial_with_seed, sampler.murmur_hash32 = old, saved_hash
