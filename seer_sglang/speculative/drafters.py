"""The drafters: groups of requests over suffix automata, and the drafting rules on top.

SuffixDecoding drafters: frequency-ranked token trees from the matched suffix.

``group-suffix`` (Seer): one index per prompt group, fed by every sibling and the prompt, so a request
drafts what its siblings wrote after the same context. ``suffix``: one index per request (its prompt and
its own output only), the SuffixDecoding baseline.

The index is a suffix automaton with occurrence counts (``automaton``); for strings up to
``max_depth`` tokens its counts equal those of a depth-limited suffix tree. A child's score is its
parent's times the child's blended probability: the count ratios after the context's few longest
matched suffixes, interpolated from the longest down (``PySuffixAutomaton._blend``). With one suffix
and no smoothing that is SuffixDecoding's ``count(child) / count(node)`` after the longest matched
suffix that has a continuation (a branch whose own context has none backs off to a shorter one rather
than ending); blending a few raises acceptance on grouped samples (siblings agree on short contexts
more than on long ones) and keeps a long match seen once from scoring as a certainty.

``sam``: a linear draft copying what followed the most recent occurrence of the longest match.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..config import DRAFT, DRAFTERS
from .automaton import Automaton, open_automaton
from .draft import DEFAULT_MIN_SCORE, Draft


@dataclass
class _Request:
    index: Automaton
    head: int  # the prompt's sequence in index, -1 without a prompt
    seq: int
    length: int = 0  # tokens in seq: only ``update`` extends it, so no native call is needed to ask


@dataclass
class _Group:
    index: Automaton | None  # shared by the siblings; None when each request has its own
    prompt: list[int] = field(default_factory=list)
    prompt_seq: int = -1
    requests: dict[str, _Request] = field(default_factory=dict)


class IndexedDrafter:
    """Groups of requests over suffix automata, with the idempotent update rule.

    Token counts are per request and exclude the group prompt; a request's drafting context is the
    prompt followed by its own tokens. ``per_request`` keeps one automaton per request (the request sees
    only its prompt and its own output); otherwise the siblings share the group's automaton.
    """

    per_request = False

    def __init__(self, native: bool | str | None = None, match_cap: int = 64, max_depth: int = 96):
        if max_depth <= match_cap:
            raise ValueError("max_depth must exceed match_cap, or drafts have no room to grow")
        self.native, self.match_cap, self.max_depth = native, match_cap, max_depth
        self._groups: dict[str, _Group] = {}

    def _open(self) -> Automaton:
        return open_automaton(self.max_depth, self.native)

    def register_group(self, group_id: str, prompt: Sequence[int] = ()) -> None:
        """Create the group; a prompt is taken if the group has none yet (it may arrive late)."""
        g = self._groups.get(group_id)
        if g is None:
            g = self._groups[group_id] = _Group(None if self.per_request else self._open())
        if prompt and not g.prompt:
            g.prompt = [int(t) for t in prompt]
            if g.index is not None:
                g.prompt_seq = g.index.add_sequence()
                g.index.extend(g.prompt_seq, g.prompt)
            for r in g.requests.values():
                r.head = self._add_prompt(r.index, g) if self.per_request else g.prompt_seq

    @staticmethod
    def _add_prompt(index: Automaton, g: _Group) -> int:
        head = index.add_sequence()
        index.extend(head, g.prompt)
        return head

    def _request(self, g: _Group, request_id: str) -> _Request:
        r = g.requests.get(request_id)
        if r is None:
            if self.per_request:
                index = self._open()
                head = self._add_prompt(index, g) if g.prompt else -1
            else:
                index, head = g.index, g.prompt_seq
            r = g.requests[request_id] = _Request(index, head, index.add_sequence())
        return r

    def update(self, group_id: str, request_id: str, prev_token_count: int, new_tokens: Sequence[int]) -> int:
        # Called for every request at every decode step, mostly with one token: kept to two dict
        # lookups and one native call.
        g = self._groups.get(group_id)
        if g is None:
            self.register_group(group_id)
            g = self._groups[group_id]
        r = g.requests.get(request_id) or self._request(g, request_id)
        skip = r.length - prev_token_count
        if skip < 0 or skip >= len(new_tokens):
            return r.length
        r.length = r.index.extend(r.seq, new_tokens[skip:] if skip else new_tokens)
        return r.length

    def draft(self, group_id: str, request_id: str, max_tokens: int, max_paths: int = 1,
              min_score: float = DEFAULT_MIN_SCORE) -> Draft:
        g = self._groups.get(group_id)
        r = g.requests.get(request_id) if g is not None else None
        if r is None or max_tokens <= 0:
            return Draft()
        return self._draft(r, max_tokens, max_paths, min_score)

    def _draft(self, r: _Request, max_tokens: int, max_paths: int, min_score: float) -> Draft:
        raise NotImplementedError

    def drop_group(self, group_id: str) -> None:
        g = self._groups.pop(group_id, None)
        if g is None:
            return
        for r in g.requests.values():
            if self.per_request:
                r.index.close()
        if g.index is not None:
            g.index.close()

    def release_group(self, group_id: str) -> None:
        """A local drafter keeps nothing elsewhere: releasing is dropping."""
        self.drop_group(group_id)

    # Read access, for replicas that sync by offsets.
    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def prompt(self, group_id: str) -> list[int]:
        g = self._groups.get(group_id)
        return list(g.prompt) if g else []

    def counts(self, group_id: str) -> dict[str, int]:
        g = self._groups.get(group_id)
        return {rid: r.length for rid, r in g.requests.items()} if g else {}

    def count(self, group_id: str, request_id: str) -> int:
        g = self._groups.get(group_id)
        r = g.requests.get(request_id) if g else None
        return r.length if r else 0

    def tokens(self, group_id: str, request_id: str, start: int = 0) -> list[int]:
        g = self._groups.get(group_id)
        r = g.requests.get(request_id) if g else None
        return r.index.tokens(r.seq, start) if r else []

    def memory_bytes(self) -> int:
        total = 0
        for g in self._groups.values():
            total += g.index.memory_bytes() if g.index is not None else 0
            total += sum(r.index.memory_bytes() for r in g.requests.values()) if self.per_request else 0
        return total


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


class SamDrafter(IndexedDrafter):
    """Suffix-automaton drafter over the group: a linear draft that copies what followed the most recent
    occurrence of the longest matched suffix. Recency beats frequency in loops and fresh rewrites; the
    scores are still the count ratios (for ranking) and ``min_score`` does not cut the draft."""

    name = "sam"

    def _draft(self, r: _Request, max_tokens: int, max_paths: int, min_score: float) -> Draft:
        toks, scores = r.index.draft_recent(r.head, r.seq, self.match_cap, max_tokens)
        return Draft(list(toks), list(range(-1, len(toks) - 1)), list(scores))


def make_drafter(name: str = DRAFT.drafter, native: bool | str | None = None, **kw) -> IndexedDrafter:
    """A drafter by name (``config.DRAFTERS``). ``native``: None uses the C automaton when it loads,
    True requires it, False forces Python, "ext" or "ctypes" picks a native binding."""
    if name == "suffix":
        return SuffixDrafter(per_request=True, native=native, **kw)
    if name == "group-suffix":
        return SuffixDrafter(per_request=False, native=native, **kw)
    if name == "sam":
        return SamDrafter(native=native, **kw)
    raise ValueError(f"unknown drafter {name!r}; choose one of {DRAFTERS}")
