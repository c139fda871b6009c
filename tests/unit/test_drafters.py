"""Model-free drafters: the suffix automaton against brute force, native against Python, and the
drafter semantics (group vs per-request, idempotent updates, SAM recency, token trees)."""

from __future__ import annotations

import heapq
import random
import time

import pytest

from seer_sglang.speculative.draft import Draft
from seer_sglang.speculative.drafters import make_drafter
from seer_sglang.speculative import native as native_mod
from seer_sglang.speculative.automaton import PySuffixAutomaton

NATIVE = native_mod.classes()
KINDS = ["python", *NATIVE]


def automaton(kind: str, depth: int):
    if kind == "python":
        return PySuffixAutomaton(depth)
    return NATIVE[kind](depth)


# ---- brute force over plain lists ----
def occurrences(seqs: list[list[int]], x: list[int]) -> int:
    return sum(1 for s in seqs for i in range(len(s) - len(x) + 1) if s[i:i + len(x)] == x)


def continuations(seqs: list[list[int]], x: list[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for s in seqs:
        for i in range(len(s) - len(x)):
            if s[i:i + len(x)] == x:
                out[s[i + len(x)]] = out.get(s[i + len(x)], 0) + 1
    return out


def brute_chain(seqs, y, depth, states):
    """The distinct suffix states of context y, longest first: suffixes (at most depth tokens, the counts
    kept) that occur and have a continuation; a shorter suffix with the same count is the same state."""
    out, last = [], None
    for n in range(min(len(y), depth), 0, -1):
        x = y[-n:]
        occ = occurrences(seqs, x)
        if occ == 0 or occ == last:
            continue
        last = occ
        kids = continuations(seqs, x)
        if kids:
            out.append((occ, kids))
        if len(out) == states:
            break
    return out


def brute_draft(seqs, context, match_cap, max_tokens, max_paths, min_score, depth=10**9, mix_states=1, escape=0.0):
    """The specification: a node's context is the last match_cap tokens of the request's context plus the
    path to it; its children blend the top-k continuations (count desc, token asc) of the context's
    mix_states longest suffix states, each state of count n with m distinct continuations keeping
    n / (n + escape * m) of the remaining mass, renormalized to the mass kept; ranked by blend desc,
    token asc, top k, score = parent x blend >= min_score; best-first by score, then push order; a new branch only while there are fewer
    than max_paths leaves."""
    window = context[-match_cap:] if match_cap > 0 else []
    toks, pars, scores, heap, seqno = [], [], [], [], 0

    def push(path, score, parent, k):
        nonlocal seqno
        mix, rem = {}, 1.0
        for occ, kids in brute_chain(seqs, window + path, depth, mix_states):
            lam = occ / (occ + escape * len(kids))
            for nc, t in sorted((-c, t) for t, c in kids.items())[:k]:
                mix[t] = mix.get(t, 0.0) + rem * lam * -nc / occ
            rem *= 1.0 - lam
        for negp, t in sorted((-p, t) for t, p in mix.items())[:k]:
            sc = score * min(1.0, -negp / (1.0 - rem))
            if sc >= min_score:
                heapq.heappush(heap, (-sc, seqno, path + [t], parent))
                seqno += 1

    has_child, leaves = set(), 0
    push([], 1.0, -1, max_tokens)
    while len(toks) < max_tokens and heap:
        nsc, _, path, parent = heapq.heappop(heap)
        if parent in has_child or parent < 0:
            if leaves >= max_paths:
                continue
            leaves += 1
        has_child.add(parent)
        toks.append(path[-1])
        pars.append(parent)
        scores.append(-nsc)
        if len(toks) < max_tokens:
            push(path, -nsc, len(toks) - 1, max_tokens - len(toks))
    bfs = Draft.from_best_first(toks, pars, scores)  # drafts come in BFS order
    return bfs.tokens, bfs.parents, bfs.scores


def random_group(rng: random.Random, kinds: list[str], depth: int, vocab: int, steps: int):
    """Interleaved appends to a few sequences (plus maybe a prompt), mirrored in plain lists."""
    autos = [automaton(k, depth) for k in kinds]
    seqs: list[list[int]] = []
    head = -1
    if rng.random() < 0.5:
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 20))]
        head = [a.add_sequence() for a in autos][0]
        for a in autos:
            a.extend(head, prompt)
        seqs.append(prompt)
    ids = []
    for _ in range(rng.randint(1, 4)):
        ids.append([a.add_sequence() for a in autos][0])
        seqs.append([])
    for _ in range(steps):
        sid = rng.choice(ids)
        chunk = [rng.randrange(vocab) for _ in range(rng.randint(0, 8))]
        if seqs[sid] and rng.random() < 0.3:  # copy a piece: repeats make the interesting structure
            i = rng.randrange(len(seqs[sid]))
            chunk = seqs[sid][i:i + rng.randint(1, 12)]
        for a in autos:
            assert a.extend(sid, chunk) == len(seqs[sid]) + len(chunk)
        seqs[sid].extend(chunk)
        yield autos, seqs, head, ids


@pytest.mark.parametrize("kind", KINDS)
def test_counts_and_drafts_match_brute_force(kind):
    rng = random.Random(7)
    for _ in range(60):
        cap = rng.choice([1, 4, 16])
        vocab = rng.choice([2, 3, 8])
        for autos, seqs, head, ids in random_group(rng, [kind], cap + 8, vocab, rng.randint(1, 20)):
            a = autos[0]
            for _ in range(3):
                s = rng.choice(seqs)
                if s:
                    i = rng.randrange(len(s))
                    x = s[i:i + rng.randint(1, cap + 8)]  # counts are kept up to max_depth
                    assert a.count(x) == occurrences(seqs, x)
            sid = rng.choice(ids)
            mt, mp, ms = rng.randint(1, 8), rng.choice([1, 2, 4]), rng.choice([0.0, 0.1, 0.3])
            blend = rng.choice([(1, 0.0), (2, 1.0), (4, 3.0)])
            context = (seqs[head] if head >= 0 else []) + seqs[sid]
            got = tuple(list(v) for v in a.draft_frequent(head, sid, cap, mt, mp, ms, *blend))
            assert got == brute_draft(seqs, context, cap, mt, mp, ms, cap + 8, *blend)
            assert a.tokens(sid) == seqs[sid]


@pytest.mark.skipif(not NATIVE, reason="no C compiler: the native automaton did not build")
def test_native_equals_python():
    rng = random.Random(11)
    checked = 0
    for _ in range(80):
        cap = rng.choice([2, 8, 64])
        depth = rng.choice([cap + 1, cap + 3, cap + 32])  # shallow depths exercise the depth cut too
        for autos, seqs, head, ids in random_group(rng, KINDS, depth, rng.choice([2, 4, 50]), rng.randint(1, 25)):
            sid = rng.choice(ids)
            mt, mp, ms = rng.randint(1, 10), rng.choice([1, 3]), rng.choice([0.0, 0.2])
            blend = rng.choice([(1, 0.0), (3, 0.5), (4, 3.0)])
            freq = [tuple(list(v) for v in a.draft_frequent(head, sid, cap, mt, mp, ms, *blend)) for a in autos]
            rec = [tuple(list(v) for v in a.draft_recent(head, sid, cap, mt)) for a in autos]
            assert all(f == freq[0] for f in freq) and all(r == rec[0] for r in rec)
            checked += bool(freq[0][0]) + bool(rec[0][0])
    assert checked > 100  # most cases drafted something, so the comparison had content


@pytest.mark.skipif(not NATIVE, reason="no C compiler: the native automaton did not build")
@pytest.mark.parametrize("depth", [2, 3, 40])  # short depths: the longest counted contexts have many too
def test_native_top_continuations_stay_exact_while_siblings_append(depth):
    """Contexts with many distinct continuations (the native core caches their top few) must draft
    exactly what Python drafts after every append, whichever sibling appended and whatever the width."""
    rng = random.Random(5)
    hubs = [0, 1, 2]  # frequent tokens and pairs, each followed by one of 60: dozens of continuations
    autos = [automaton(k, depth) for k in KINDS]
    seqs: list[list[int]] = [[] for _ in range(4)]
    for sid in range(4):
        assert all(a.add_sequence() == sid for a in autos)
    for step in range(400):
        sid = rng.randrange(4)
        if seqs[sid] and rng.random() < 0.3:  # siblings copy each other: long matches and loops
            src = seqs[rng.randrange(4)] or seqs[sid]
            i = rng.randrange(len(src))
            chunk = src[i:i + rng.randint(1, 10)]
        else:
            chunk = [t for _ in range(rng.randint(1, 3))
                     for t in (*rng.sample(hubs, rng.randint(1, 2)), 3 + rng.randrange(60))]
        for a in autos:
            a.extend(sid, chunk)
        seqs[sid].extend(chunk)
        reader = rng.randrange(4)
        mt = rng.choice([4, 8, 12])  # past 8 tokens the native core scans instead of reading its cache
        blend = rng.choice([(1, 0.0), (4, 3.0), (4, 0.5)])
        drafts = [tuple(list(v) for v in a.draft_frequent(-1, reader, 16, mt, 4, 0.001, *blend)) for a in autos]
        assert all(d == drafts[0] for d in drafts), f"step {step}"
    followers = {s[i + 1] for s in seqs for i in range(len(s) - 1) if s[i] == 0}
    assert len(followers) >= 40  # the hub contexts did have many continuations
@pytest.mark.parametrize("kind", KINDS)
def test_sam_recency_matches_brute_force(kind):
    rng = random.Random(5)
    for _ in range(60):
        cap, n = rng.choice([2, 6]), rng.randint(1, 3)
        a = automaton(kind, cap + 16)
        seqs: list[list[int]] = [[] for _ in range(n)]
        stamps: list[list[int]] = [[] for _ in range(n)]
        for _ in range(n):
            a.add_sequence()
        clock = 0
        for _ in range(rng.randint(1, 20)):
            k = rng.randrange(n)
            chunk = [rng.randrange(3) for _ in range(rng.randint(1, 6))]
            a.extend(k, chunk)
            for c in chunk:
                seqs[k].append(c)
                stamps[k].append(clock)
                clock += 1
            sid, mt = rng.randrange(n), rng.randint(1, 6)
            # the two most recent occurrences of the longest match; the first with a continuation wins
            want: tuple[list[int], list[float]] = ([], [])
            window = seqs[sid][-cap:]
            for m in range(len(window), 0, -1):
                x = window[-m:]
                occ = sorted(((stamps[j][i + m - 1], j, i + m - 1) for j, s in enumerate(seqs)
                              for i in range(len(s) - m + 1) if s[i:i + m] == x), reverse=True)[:2]
                hit = next(((j, e) for _, j, e in occ if e + 1 < len(seqs[j])), None)
                if hit:
                    cont = seqs[hit[0]][hit[1] + 1:hit[1] + 1 + mt]
                    score, scores = 1.0, []
                    for i in range(len(cont)):
                        score = score * (occurrences(seqs, x + cont[:i + 1]) / float(occurrences(seqs, x + cont[:i])))
                        scores.append(score)
                    want = (cont, scores)
                    break
            got = a.draft_recent(-1, sid, cap, mt)
            assert (list(got[0]), list(got[1])) == want


@pytest.mark.parametrize("native", [False, True] if NATIVE else [False])
def test_group_mode_drafts_sibling_text_suffix_mode_does_not(native):
    prompt = [1, 2, 3, 4]
    sibling = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19]
    drafts = {}
    for mode in ("group-suffix", "suffix"):
        d = make_drafter(mode, native=native)
        d.register_group("g", prompt)
        d.update("g", "a", 0, sibling)
        d.update("g", "b", 0, sibling[:3])
        drafts[mode] = d.draft("g", "b", 5)
    assert drafts["group-suffix"].tokens == [13, 14, 15, 16, 17]
    assert drafts["group-suffix"].is_linear()
    assert drafts["group-suffix"].scores == [0.5] * 5  # own occurrence (no continuation) + the sibling's
    assert drafts["suffix"].tokens == []


def test_prompt_is_part_of_the_context_and_may_arrive_late():
    for mode in ("group-suffix", "suffix"):
        d = make_drafter(mode, native=False)
        d.update("g", "a", 0, [7, 8, 9])
        assert d.draft("g", "a", 4).tokens == []
        d.register_group("g", [5, 6, 7, 8, 9, 1, 2, 3])  # the prompt repeats what "a" wrote
        assert d.draft("g", "a", 3).tokens == [1, 2, 3]
        assert d.count("g", "a") == 3  # counts exclude the prompt


@pytest.mark.parametrize("native", [False, True] if NATIVE else [False])
def test_update_is_idempotent_and_rejects_gaps(native):
    d = make_drafter("group-suffix", native=native)
    assert d.update("g", "r", 0, [1, 2, 3]) == 3
    assert d.update("g", "r", 0, [1, 2, 3]) == 3  # replay
    assert d.update("g", "r", 2, [3, 4, 5]) == 5  # overlap: only the unseen tail
    assert d.update("g", "r", 9, [6, 7]) == 5  # gap: ignored, tells where it stands
    assert d.update("g", "r", 5, []) == 5
    assert d.update("g", "r", 5, [6]) == 6
    assert d.tokens("g", "r") == [1, 2, 3, 4, 5, 6]
    assert d.counts("g") == {"r": 6}
    assert d.update("g", "new", 4, [1]) == 0  # an unknown request starts at 0


@pytest.mark.parametrize("native", [False, True] if NATIVE else [False])
def test_sam_drafter_follows_the_most_recent_occurrence(native):
    text = [1, 2, 3, 9, 1, 2, 3, 9, 1, 2, 3, 7, 7]  # "1 2 3" went on with 9 twice, then with 7
    sam, freq = make_drafter("sam", native=native), make_drafter("group-suffix", native=native)
    for d in (sam, freq):
        d.update("g", "a", 0, text)
        d.update("g", "b", 0, [5, 1, 2, 3])
    assert sam.draft("g", "b", 2).tokens == [7, 7]
    assert freq.draft("g", "b", 2).tokens == [9, 1]
    got = sam.draft("g", "b", 2)
    assert got.is_linear() and got.scores[0] == pytest.approx(1 / 4)  # count(1 2 3 7) / count(1 2 3)


@pytest.mark.parametrize("native", [False, True] if NATIVE else [False])
def test_tree_drafts_are_valid_bfs_trees(native):
    rng = random.Random(3)
    d = make_drafter("group-suffix", native=native)
    base = [rng.randrange(40) for _ in range(300)]
    for r in range(8):  # siblings: noisy copies of one text, so branches exist
        seq = [t if rng.random() > 0.1 else rng.randrange(40) for t in base]
        d.update("g", f"r{r}", 0, seq[:rng.randint(50, 300)])
    trees = 0
    for r in range(8):
        for max_tokens, max_paths in ((8, 4), (16, 2), (6, 1)):
            t = d.draft("g", f"r{r}", max_tokens, max_paths=max_paths, min_score=0.01)
            depths = t.depths()
            assert len(t) <= max_tokens
            assert depths == sorted(depths)  # BFS: levels in order
            for i, p in enumerate(t.parents):
                assert -1 <= p < i
                if p >= 0:
                    assert t.scores[i] <= t.scores[p]  # scores never grow along a path
            assert all(0 < s <= 1 and s >= 0.01 for s in t.scores)
            leaves = [i for i in range(len(t)) if i not in set(t.parents)]
            assert len(leaves) <= max_paths
            if max_paths == 1:
                assert t.is_linear()
            trees += not t.is_linear()
    assert trees > 0


def test_from_best_first_orders_by_levels():
    # acceptance order: a(root child) b(child of a) c(root child) d(child of c) e(child of a)
    d = Draft.from_best_first([10, 11, 12, 13, 14], [-1, 0, -1, 2, 0], [0.9, 0.8, 0.5, 0.4, 0.3])
    assert d.tokens == [10, 12, 11, 14, 13]
    assert d.parents == [-1, -1, 0, 0, 1]
    assert d.scores == [0.9, 0.5, 0.8, 0.3, 0.4]
    assert not d.is_linear() and Draft([1, 2], [-1, 0], [1.0, 1.0]).is_linear()


@pytest.mark.parametrize("native", [False, True] if NATIVE else [False])
def test_drop_group_frees_it(native):
    d = make_drafter("group-suffix", native=native)
    d.register_group("g", [1, 2, 3])
    d.update("g", "r", 0, list(range(1000)))
    d.update("h", "r", 0, [1, 2, 3, 1, 2])
    if native:
        assert d.memory_bytes() > 1000 * 4
    d.drop_group("g")
    assert not d.has_group("g") and d.group_ids() == ["h"]
    assert d.draft("g", "r", 4).tokens == []
    d.drop_group("h")
    assert d.memory_bytes() == 0
    d.drop_group("never-there")


@pytest.mark.parametrize("kind", KINDS)
def test_repetition_loops_stay_linear_time(kind):
    """A generation stuck repeating one phrase must not make appends quadratic (bounded suffix walks)."""
    n = 200_000 if kind != "python" else 20_000
    a = automaton(kind, 96)
    s = a.add_sequence()
    t = time.perf_counter()
    a.extend(s, [5, 6, 7] * (n // 3))
    elapsed = time.perf_counter() - t
    assert elapsed < 5.0, f"{n} tokens took {elapsed:.2f}s"
    tokens, _, scores = a.draft_frequent(-1, s, 64, 6, 1, 0.1)
    assert tokens == [5, 6, 7, 5, 6, 7] and scores[0] > 0.99


def test_unknown_names_and_bad_depth_are_rejected():
    with pytest.raises(ValueError):
        make_drafter("eagle")
    with pytest.raises(ValueError):
        make_drafter("group-suffix", match_cap=64, max_depth=64)


def test_budget_order_takes_likeliest_nodes_whose_parent_is_taken():
    # root -> 0 (0.9) -> 2 (0.8) -> 4 (0.1); root -> 1 (0.5) -> 3 (0.45)
    draft = Draft([10, 11, 12, 13, 14], [-1, -1, 0, 1, 2], [0.9, 0.5, 0.8, 0.45, 0.1])
    order = draft.best_first()
    assert order == [0, 2, 1, 3, 4]
    for k in range(len(order) + 1):  # every prefix is a tree, kept in BFS order
        sub = draft.keep(order[:k])
        assert len(sub) == k and all(-1 <= p < i for i, p in enumerate(sub.parents))
    assert draft.keep(order[:3]) == Draft([10, 11, 12], [-1, -1, 0], [0.9, 0.5, 0.8])
    # a child scored above its parent still waits for it; nodes without scores count as equally likely
    assert Draft([1, 2], [-1, 0], [0.2, 0.9]).best_first() == [0, 1]
    assert Draft([1, 2, 3], [-1, -1, 0]).best_first() == [0, 1, 2]


def test_long_tail_share_of_a_batch_by_router_priority():
    from seer_sglang.speculative.budget import high_priority

    assert high_priority([None, None]) == [False, False]
    assert high_priority([5, 1, 3, 9, None, 2, 8, 7]) == [False, False, False, True, False, False, False, False]
    assert high_priority([4, 4, 1]) == [True, True, False]  # ties at the cut all count


@pytest.mark.parametrize("native", [False, True] if NATIVE else [False])
def test_blend_weighs_a_long_match_seen_once_against_what_the_siblings_agree_on(native):
    """One sibling wrote 2 3 4 5 -> 9; eight others wrote 8 4 5 -> 6. For a request ending in 2 3 4 5
    the longest match alone drafts 9 and nothing else; the blend also hears the shorter context 4 5,
    where the group agrees on 6, and ranks 6 first with 9 as the second branch."""
    drafts = {}
    for blend in ((1, 0.0), (4, 3.0)):
        d = make_drafter("group-suffix", native=native, mix_states=blend[0], escape=blend[1])
        d.register_group("g", [100, 101])
        d.update("g", "odd", 0, [1, 2, 3, 4, 5, 9])
        for r in range(8):
            d.update("g", f"s{r}", 0, [8, 4, 5, 6, 7])
        d.update("g", "me", 0, [2, 3, 4, 5])
        drafts[blend] = d.draft("g", "me", 4, max_paths=2)
    longest, blended = drafts[(1, 0.0)], drafts[(4, 3.0)]
    assert longest.tokens == [9]
    roots = [t for t, p in zip(blended.tokens, blended.parents) if p == -1]
    assert roots == [6, 9]
    assert blended.scores[0] > blended.scores[1] and 0 < blended.scores[1] < 1
