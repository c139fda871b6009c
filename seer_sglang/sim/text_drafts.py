"""Speculation over a recorded text in the simulator: the instances' own drafter and budget, step by step.

With seeded verification a draft token is accepted exactly when it is the token the recording has
there, so on a replayed text acceptance needs no model: the simulator feeds each sample's committed
tokens to the drafter the instances use, drafts every request of a verify step, gives out the draft
budget over the drafts' own scores (each instance its own adaptive budget, learning acceptance from
its own steps), keeps each request's best nodes as the instance's speculative worker does
(``plugin/spec_worker.py``), and takes the accepted path of what it kept.

Each instance drafts from its own replica, as the instances' draft clients do
(``draft_server/client.py``): a token reaches the replica of the instance that wrote it when its step
ends, and every other replica ``lag_s`` later, through the draft server's sync rounds. Siblings that
decode in step on different instances draft from each other's text only that much later: a step that
starts before the sibling's tokens arrive drafts without them.

Acceptance then follows the schedule the simulator runs: a sample that decodes behind its siblings
drafts from their text ahead of it, as it does on a real instance. A figure measured with the whole
group decoding in step (``benchmarks.draft_replay``) cannot see that, and under length-context
scheduling, where samples advance unevenly, it falls short of the measured acceptance.
"""

from __future__ import annotations

import heapq
import math
from typing import Mapping, Sequence

from ..config import DRAFT
from ..speculative.budget import AUTO_DRAFT_TOKENS, BudgetRequest
from ..speculative.draft import accepted_length
from ..speculative.drafters import make_drafter
from .workload import sim_group_id


class TextDrafts:
    """The drafters' state over one simulated rollout of a recorded text. ``texts``: each sample's
    recorded output by (group, sample index) of the trace; ``prompts``: each group's prompt tokens;
    ``replicas``: one per instance; ``lag_s``: how long a token takes to reach the other replicas."""

    def __init__(self, texts: Mapping[tuple[int, int], Sequence[int]], prompts: Mapping[int, Sequence[int]],
                 drafter: str = DRAFT.drafter, draft_tokens: int = AUTO_DRAFT_TOKENS["ragged"],
                 draft_paths: int = DRAFT.draft_paths, replicas: int = 1, lag_s: float = 0.0):
        self.texts = texts
        self.draft_tokens, self.draft_paths = draft_tokens, draft_paths
        self.lag_s = lag_s
        self.drafters = [make_drafter(drafter) for _ in range(replicas)]
        self.fed: list[dict[str, int]] = [{} for _ in range(replicas)]  # per replica: rid -> tokens it holds
        self.arriving: list[tuple[float, int, int, tuple[int, int], str, int]] = []  # on their way to replicas
        self._seq = 0
        for d in self.drafters:
            for group, prompt in prompts.items():
                d.register_group(sim_group_id(group), list(prompt))

    def covers(self, keys: Sequence[tuple[int, int] | None]) -> bool:
        return all(key in self.texts for key in keys)

    def _update(self, replica: int, key: tuple[int, int], rid: str, generated: int) -> None:
        start = self.fed[replica].get(rid, 0)
        if generated > start:
            self.fed[replica][rid] = self.drafters[replica].update(sim_group_id(key[0]), rid, start,
                                                                   list(self.texts[key][start:generated]))

    def feed(self, key: tuple[int, int], rid: str, generated: int, replica: int = 0, at: float = 0.0) -> None:
        """The sample's output up to ``generated`` tokens, committed on instance ``replica`` by the step
        that ends at ``at``: that instance's next step drafts from them, the others' from ``at + lag_s``."""
        self._update(replica, key, rid, generated)
        for other in range(len(self.drafters)):
            if other != replica:
                self._seq += 1
                heapq.heappush(self.arriving, (at + self.lag_s, self._seq, other, key, rid, generated))

    def _deliver(self, now: float) -> None:
        while self.arriving and self.arriving[0][0] <= now:
            _, _, replica, key, rid, generated = heapq.heappop(self.arriving)
            self._update(replica, key, rid, generated)

    def verify(self, requests: Sequence[tuple[tuple[int, int], str, int]], high: Sequence[bool],
               budget, replica: int = 0, now: float = math.inf,
               kv_tokens: int = 0) -> tuple[list[int], list[int], int]:
        """One verify step at ``now`` on instance ``replica`` over ``requests`` ((group, index), rid,
        output tokens committed), with the draft length ``budget`` (an instance's ``AdaptiveBudget`` or
        a ``DraftBudget``) picks for the batch: the tokens each request commits (its accepted path and
        the bonus token, up to its text's end), the drafts each verified, and the draft length the step
        ran at. A request's own tokens are in its instance's replica whatever the lag: a continuation
        brings its output with it, and the instance feeds it to the drafter at its first step."""
        self._deliver(now)
        drafter = self.drafters[replica]
        drafts, orders, asks = [], [], []
        for (key, rid, pos), h in zip(requests, high):
            self._update(replica, key, rid, pos)
            draft = drafter.draft(sim_group_id(key[0]), rid, self.draft_tokens, self.draft_paths)
            order = draft.best_first()
            scores = draft.node_scores()
            drafts.append(draft)
            orders.append(order)
            asks.append(BudgetRequest(rid, h, [scores[i] for i in order]))
        gamma = budget.gamma_star(len(requests), kv_tokens)
        given = budget.allocate(asks, len(requests), gamma).per_request if gamma else {}
        made, verified = [], []
        for (key, rid, pos), draft, order in zip(requests, drafts, orders):
            k = min(given.get(rid, 0), len(draft))
            kept = draft if k == len(draft) else draft.keep(order[:k])
            text = self.texts[key]
            made.append(max(1, min(len(text) - pos, 1 + accepted_length(kept, text[pos:]))))
            verified.append(k)
        return made, verified, gamma
