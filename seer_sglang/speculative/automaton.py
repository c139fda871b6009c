"""Suffix automaton over a group's token sequences: the index behind every drafter here.

One generalized suffix automaton holds several sequences that grow independently (the siblings of a
prompt group, and the prompt). Each state keeps the number of occurrences of its strings and their two
most recent end positions, for states whose shortest string is at most ``max_depth`` tokens. That
gives both drafting rules:

- frequency (SuffixDecoding): after the longest matched suffix ``x``, child ``c`` scores
  ``count(xc) / count(x)``, the same ratio a depth-limited suffix tree gives;
- recency (the SAM drafter): copy what followed the most recent occurrence of ``x``.

Limiting counts to short strings bounds an append to one walk of at most ``max_depth`` suffix links,
so degenerate repetitive outputs (a loop of one phrase) stay linear-time.

``PySuffixAutomaton`` is the reference; ``seer_sglang.speculative.native`` runs the same algorithm in C and
must return identical drafts. ``open_automaton`` picks the native one when it is available.
"""

from __future__ import annotations

import heapq
from typing import Protocol, Sequence

from .draft import Draft

DEFAULT_MAX_DEPTH = 96


class Automaton(Protocol):
    def add_sequence(self) -> int: ...
    def extend(self, seq: int, tokens: Sequence[int]) -> int: ...
    def length(self, seq: int) -> int: ...
    def tokens(self, seq: int, start: int = 0) -> list[int]: ...
    def count(self, tokens: Sequence[int]) -> int: ...
    def draft_frequent(self, head: int, seq: int, match_cap: int, max_tokens: int, max_paths: int,
                       min_score: float, mix_states: int = 1,
                       escape: float = 0.0) -> tuple[list[int], list[int], list[float]]: ...
    def draft_recent(self, head: int, seq: int, match_cap: int, max_tokens: int) -> tuple[list[int], list[float]]: ...
    def memory_bytes(self) -> int: ...
    def close(self) -> None: ...


class PySuffixAutomaton:
    """Pure-Python automaton; the behaviour the C version reproduces exactly."""

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH):
        self.depth = max_depth
        self._len = [0]
        self._link = [-1]
        self._cnt = [0]
        self._next: list[dict[int, int]] = [{}]
        self._rec = [[-1, -1, -1, -1]]  # last_seq, last_end, prev_seq, prev_end
        self._seqs: list[list[int]] = []
        self._last: list[int] = []
        self._track: list[int] = []  # state holding the suffix of length _tlen
        self._tlen: list[int] = []

    def _new_state(self, length: int, link: int) -> int:
        self._len.append(length)
        self._link.append(link)
        self._cnt.append(0)
        self._next.append({})
        self._rec.append([-1, -1, -1, -1])
        return len(self._len) - 1

    def _clone(self, p: int, q: int, c: int) -> int:
        cl = self._new_state(self._len[p] + 1, self._link[q])
        self._cnt[cl] = self._cnt[q]
        self._rec[cl] = list(self._rec[q])
        self._next[cl] = dict(self._next[q])
        while p >= 0 and self._next[p].get(c) == q:
            self._next[p][c] = cl
            p = self._link[p]
        self._link[q] = cl
        return cl

    def add_sequence(self) -> int:
        self._seqs.append([])
        self._last.append(0)
        self._track.append(0)
        self._tlen.append(0)
        return len(self._seqs) - 1

    def _extend1(self, sid: int, c: int) -> None:
        ln, link, nxt = self._len, self._link, self._next
        tlen = self._tlen[sid]
        newlen = tlen + 1 if tlen < self.depth else self.depth
        srclen, u = newlen - 1, self._track[sid]
        if srclen == 0:
            u = 0
        elif srclen < tlen and srclen <= ln[link[u]]:
            u = link[u]
        p, split, cl = self._last[sid], -1, -1
        q = nxt[p].get(c)
        if q is not None:
            if ln[q] == ln[p] + 1:
                cur = q
            else:
                cl = self._clone(p, q, c)
                split, cur = q, cl
        else:
            cur = self._new_state(ln[p] + 1, 0)
            while p >= 0 and c not in nxt[p]:
                nxt[p][c] = cur
                p = link[p]
            if p >= 0:
                q = nxt[p][c]
                if ln[q] == ln[p] + 1:
                    link[cur] = q
                else:
                    cl = self._clone(p, q, c)
                    split = q
                    link[cur] = cl
        self._last[sid] = cur
        if u == split and srclen <= ln[cl]:
            u = cl
        t = nxt[u][c]
        self._track[sid], self._tlen[sid] = t, newlen
        seq = self._seqs[sid]
        pos = len(seq)
        seq.append(c)
        cnt, rec = self._cnt, self._rec
        v = t
        while v > 0:
            cnt[v] += 1
            r = rec[v]
            r[2], r[3], r[0], r[1] = r[0], r[1], sid, pos
            v = link[v]

    def extend(self, seq: int, tokens: Sequence[int]) -> int:
        for c in tokens:
            self._extend1(seq, int(c))
        return len(self._seqs[seq])

    def length(self, seq: int) -> int:
        return len(self._seqs[seq])

    def tokens(self, seq: int, start: int = 0) -> list[int]:
        return self._seqs[seq][start:]

    def count(self, tokens: Sequence[int]) -> int:
        """Occurrences of ``tokens`` (at most max_depth of them) over all sequences."""
        if len(tokens) > self.depth:
            return -1
        v = 0
        for c in tokens:
            v = self._next[v].get(int(c), -1)
            if v < 0:
                return 0
        return self._cnt[v] if tokens else 0

    def memory_bytes(self) -> int:
        return 0  # not tracked for the Python reference

    def close(self) -> None:
        pass

    def _match_tail(self, head: int, sid: int, match_cap: int) -> int:
        s = self._seqs[sid]
        if match_cap <= 0:
            window: list[int] = []
        elif len(s) >= match_cap:
            window = s[len(s) - match_cap:]
        else:
            h = self._seqs[head] if 0 <= head < len(self._seqs) else []
            window = h[max(0, len(h) - (match_cap - len(s))):] + s
        v, nxt, link = 0, self._next, self._link
        for c in window:
            t = nxt[v].get(c)
            while t is None and v > 0:
                v = link[v]
                t = nxt[v].get(c)
            v = 0 if t is None else t
        return v

    def _chain(self, w: int, states: int) -> list[int]:
        """The suffix states of a context, longest first: ``w`` (its longest occurring suffix) and its
        suffix links, those with a continuation and kept counts, at most ``states`` of them."""
        out: list[int] = []
        ln, link, nxt, cnt = self._len, self._link, self._next, self._cnt
        while w > 0 and len(out) < states:
            if nxt[w] and cnt[w] > 0 and ln[link[w]] + 1 <= self.depth:
                out.append(w)
            w = link[w]
        return out

    def _blend(self, chain: list[int], score: float, k: int, escape: float,
               min_score: float) -> list[tuple[float, int, int]]:
        """The k likeliest next tokens after a context whose suffix states are ``chain``: (path score,
        token, state after it). Each state's top-k continuations by count are interpolated from the
        longest context down, Witten-Bell style: a state of count n with m distinct continuations keeps
        n / (n + escape * m) of the remaining mass, and the mass the chain kept is renormalized to 1. A
        long match seen once then shares its weight with shorter contexts, where the siblings agree
        more and whose continuations widen the tree; a lone state gives its plain count ratios."""
        if k <= 0 or not chain:
            return []
        cnt, nxt = self._cnt, self._next
        mix: dict[int, float] = {}
        rem = 1.0
        for u in chain:
            cu = float(cnt[u])
            lam = cu / (cu + escape * len(nxt[u]))
            for negc, tok in sorted((-cnt[d], tok) for tok, d in nxt[u].items())[:k]:
                mix[tok] = mix.get(tok, 0.0) + rem * lam * -negc / cu
            rem *= 1.0 - lam
        out, total = [], 1.0 - rem
        for negp, tok in sorted((-p, tok) for tok, p in mix.items())[:k]:
            sc = score * min(1.0, -negp / total)  # one token holding all the mass: 1, not 1 + ulp
            if sc >= min_score:
                out.append((sc, tok, next(nxt[u][tok] for u in chain if tok in nxt[u])))
        return out

    def draft_frequent(self, head: int, seq: int, match_cap: int, max_tokens: int, max_paths: int,
                       min_score: float, mix_states: int = 1,
                       escape: float = 0.0) -> tuple[list[int], list[int], list[float]]:
        """Best-first token tree, returned in BFS order. A node's children blend the continuations of
        its context's ``mix_states`` longest suffix states (``_blend``); one state with ``escape`` 0 is
        SuffixDecoding's count ratio after the longest matched suffix that has a continuation."""
        toks: list[int] = []
        pars: list[int] = []
        scores: list[float] = []
        if not 0 <= seq < len(self._seqs) or max_tokens <= 0 or max_paths <= 0 or mix_states <= 0:
            return toks, pars, scores
        heap: list[tuple[float, int, int, int, int]] = []
        seqno = 0

        def push(w: int, score: float, parent: int, k: int) -> None:
            nonlocal seqno
            for sc, tok, d in self._blend(self._chain(w, mix_states), score, k, escape, min_score):
                heapq.heappush(heap, (-sc, seqno, d, parent, tok))
                seqno += 1

        has_child: dict[int, bool] = {}
        leaves = 0
        push(self._match_tail(head, seq, match_cap), 1.0, -1, max_tokens)
        while len(toks) < max_tokens and heap:
            negsc, _, d, parent, tok = heapq.heappop(heap)
            if has_child.get(parent) or parent < 0:
                if leaves >= max_paths:
                    continue
                leaves += 1
            has_child[parent] = True
            toks.append(tok)
            pars.append(parent)
            scores.append(-negsc)
            n = len(toks)
            if n < max_tokens:
                push(d, -negsc, n - 1, max_tokens - n)
        bfs = Draft.from_best_first(toks, pars, scores)
        return bfs.tokens, bfs.parents, bfs.scores

    def draft_recent(self, head: int, seq: int, match_cap: int, max_tokens: int) -> tuple[list[int], list[float]]:
        """Linear draft copied from the most recent occurrence of the match that has a continuation."""
        if not 0 <= seq < len(self._seqs) or max_tokens <= 0:
            return [], []
        v = self._match_tail(head, seq, match_cap)
        occ = None
        while v > 0:
            ls, le, ps, pe = self._rec[v]
            if ls >= 0 and le + 1 < len(self._seqs[ls]):
                occ = (ls, le)
                break
            if ps >= 0 and pe + 1 < len(self._seqs[ps]):
                occ = (ps, pe)
                break
            v = self._link[v]
        if occ is None:
            return [], []
        cont = self._seqs[occ[0]][occ[1] + 1:occ[1] + 1 + max_tokens]
        depth_cap = self.depth - (self._len[self._link[v]] + 1)
        score, cur, scores = 1.0, v, []
        for i, tok in enumerate(cont):
            if i < depth_cap:
                nx = self._next[cur][tok]
                score = score * (self._cnt[nx] / float(self._cnt[cur]))
                cur = nx
            scores.append(score)
        return list(cont), scores


def open_automaton(max_depth: int = DEFAULT_MAX_DEPTH, native: bool | str | None = None) -> Automaton:
    """``native``: None = the fastest native automaton that loads, else Python; True = native required;
    False = Python; "ext" / "ctypes" = that native binding (for comparisons)."""
    if native is False:
        return PySuffixAutomaton(max_depth)
    from .native import best, classes

    if isinstance(native, str):
        return classes()[native](max_depth)
    cls = best()
    if cls is not None:
        return cls(max_depth)
    if native:
        raise RuntimeError("the native suffix automaton is not available (no C compiler?)")
    return PySuffixAutomaton(max_depth)
