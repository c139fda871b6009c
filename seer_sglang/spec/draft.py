"""Draft token trees, the drafter interface, and the group/request bookkeeping the drafters share."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from seer_sglang.spec.sam import Automaton

# Nodes whose estimated acceptance falls below this are not drafted. Low: at a fixed verify width (GPU)
# extra nodes are free, and on CPU the draft budget takes nodes by score anyway.
DEFAULT_MIN_SCORE = 0.01


@dataclass
class Draft:
    """A token tree hanging off the last verified token (the root, not included).

    Nodes are in BFS order, so a parent always comes before its children and the verifier can build
    the tree mask in one pass.
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # index into tokens, -1 for the root
    scores: list[float] = field(default_factory=list)  # estimated probability the path to i is accepted

    def __len__(self) -> int:
        return len(self.tokens)

    def is_linear(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def depths(self) -> list[int]:
        out: list[int] = []
        for p in self.parents:
            out.append(1 if p < 0 else out[p] + 1)
        return out

    def node_scores(self) -> list[float]:
        """Each node's acceptance estimate; a draft without scores counts every node as 1."""
        return self.scores if len(self.scores) == len(self.tokens) else [1.0] * len(self.tokens)

    def best_first(self) -> list[int]:
        """Node indices in the order a budget should take them: the most likely node whose parent is
        already taken, so every prefix of the order is a tree."""
        scores = self.node_scores()
        children: list[list[int]] = [[] for _ in range(len(self.tokens) + 1)]
        for i, p in enumerate(self.parents):
            if -1 <= p < i:
                children[p + 1].append(i)
        order: list[int] = []
        frontier = [(-scores[i], i) for i in children[0]]
        heapq.heapify(frontier)
        while frontier:
            _, i = heapq.heappop(frontier)
            order.append(i)
            for c in children[i + 1]:
                heapq.heappush(frontier, (-scores[c], c))
        return order

    def keep(self, nodes: Sequence[int]) -> Draft:
        """The sub-draft of ``nodes`` (closed under parents), still in BFS order."""
        kept = sorted(nodes)
        new_index = {-1: -1, **{old: new for new, old in enumerate(kept)}}
        scores = [self.scores[i] for i in kept] if len(self.scores) == len(self.tokens) else []
        return Draft([self.tokens[i] for i in kept], [new_index[self.parents[i]] for i in kept], scores)

    @classmethod
    def from_best_first(cls, tokens: list[int], parents: list[int], scores: list[float]) -> Draft:
        """Reorder a tree listed in acceptance order (parents first) into BFS order."""
        if all(p == i - 1 for i, p in enumerate(parents)):
            return cls(list(tokens), list(parents), list(scores))
        children: list[list[int]] = [[] for _ in range(len(tokens) + 1)]
        for i, p in enumerate(parents):
            children[p + 1].append(i)
        order, new_index, new_parents = [], {-1: -1}, []
        queue = list(children[0])
        for i in queue:  # the list grows while it is walked: a BFS
            new_index[i] = len(order)
            order.append(i)
            new_parents.append(new_index[parents[i]])
            queue.extend(children[i + 1])
        return cls([tokens[i] for i in order], new_parents, [scores[i] for i in order])


class Drafter(Protocol):
    def register_group(self, group_id: str, prompt: Sequence[int] = ()) -> None: ...

    def update(self, group_id: str, request_id: str, prev_token_count: int, new_tokens: Sequence[int]) -> int:
        """Append the tokens after the first prev_token_count; idempotent. Returns the stored count, which
        is below prev_token_count when there is a gap (then nothing is stored and the sender resends)."""
        ...

    def draft(self, group_id: str, request_id: str, max_tokens: int, max_paths: int = 1,
              min_score: float = DEFAULT_MIN_SCORE) -> Draft: ...

    def drop_group(self, group_id: str) -> None: ...


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
        from seer_sglang.spec.sam import open_automaton

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
