"""SuffixDecoding drafters: frequency-ranked token trees from the matched suffix.

``group-suffix`` (Seer): one index per prompt group, fed by every sibling and the prompt, so a request
drafts what its siblings wrote after the same context. ``suffix``: one index per request (its prompt and
its own output only), the SuffixDecoding baseline.

The index is a suffix automaton with occurrence counts (``seer_sglang.spec.sam``); for strings up to
``max_depth`` tokens its counts equal those of a depth-limited suffix tree. A child's score is its
parent's times the child's blended probability: the count ratios after the context's few longest
matched suffixes, interpolated from the longest down (``PySuffixAutomaton._blend``). With one suffix and
no smoothing that is SuffixDecoding's ``count(child) / count(node)`` after the longest matched suffix
that has a continuation (a branch whose own context has none backs off to a shorter one rather than
ending); blending a few raises acceptance
on grouped samples (siblings agree on short contexts more than on long ones) and keeps a long match
seen once from scoring as a certainty.
"""

from __future__ import annotations

from seer_sglang.spec.draft import Draft, IndexedDrafter, _Request


MIX_STATES = 4  # suffix states blended per draft node
ESCAPE = 3.0  # Witten-Bell escape weight: a state keeps n / (n + ESCAPE * distinct continuations)


class SuffixDrafter(IndexedDrafter):
    """Match the longest suffix (at most match_cap tokens) of the request's context, then expand
    best-first by score: ``max_paths=1`` is the greedy path, ``max_paths=k`` a tree of at most
    ``max_tokens`` nodes and ``k`` leaves; nodes below ``min_score`` are not drafted. ``mix_states``
    suffix states are blended per node with Witten-Bell weight ``escape``."""

    def __init__(self, per_request: bool = False, mix_states: int = MIX_STATES, escape: float = ESCAPE,
                 **kw):
        super().__init__(**kw)
        self.per_request = per_request
        self.mix_states, self.escape = mix_states, escape

    @property
    def name(self) -> str:
        return "suffix" if self.per_request else "group-suffix"

    def _draft(self, r: _Request, max_tokens: int, max_paths: int, min_score: float) -> Draft:
        return Draft(*r.index.draft_frequent(r.head, r.seq, self.match_cap, max_tokens, max_paths, min_score,
                                             self.mix_states, self.escape))
