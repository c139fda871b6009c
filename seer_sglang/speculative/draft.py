"""Draft token trees and the drafter interface."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from ..config import DRAFT

# Nodes whose estimated acceptance falls below this are not drafted. Low: at a fixed verify width (GPU)
# extra nodes are free, and on CPU the draft budget takes nodes by score anyway.
DEFAULT_MIN_SCORE = DRAFT.min_score


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

    def release_group(self, group_id: str) -> None:
        """Free the group here; a drafter synced with a draft server keeps the server's copy."""
        ...

    def prompt(self, group_id: str) -> list[int]:
        """The group's prompt as the drafter holds it ([] if none yet)."""
        ...


def accepted_length(draft: Draft, continuation: list[int]) -> int:
    """Draft tokens accepted against the true continuation: the longest root path of the tree that
    the continuation follows token by token."""
    children: dict[int, dict[int, int]] = {}
    for i, (token, parent) in enumerate(zip(draft.tokens, draft.parents)):
        children.setdefault(parent, {}).setdefault(token, i)
    node, n = -1, 0
    for token in continuation:
        node = children.get(node, {}).get(token, -2)
        if node == -2:
            break
        n += 1
    return n
