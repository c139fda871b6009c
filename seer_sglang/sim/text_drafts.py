"""Speculation over a recorded text in the simulator: the instances' own drafter and budget, step by step.

With seeded verification a draft token is accepted exactly when it is the token the recording has
there, so on a replayed text acceptance needs no model: the simulator feeds each sample's committed
tokens to the drafter the instances use (one for the whole rollout, as the draft server shares a
group's text across instances), drafts every request of a verify step, gives out the draft budget
over the drafts' own scores (each instance its own adaptive budget, learning acceptance from its own
steps), keeps each request's best nodes as the instance's speculative worker does
(``plugin/spec_worker.py``), and takes the accepted path of what it kept.

Acceptance then follows the schedule the simulator runs: a sample that decodes behind its siblings
drafts from their text ahead of it, as it does on a real instance. A figure measured with the whole
group decoding in step (``benchmarks.draft_replay``) cannot see that, and under length-context
scheduling, where samples advance unevenly, it falls short of the measured acceptance.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..config import DRAFT
from ..speculative.budget import BudgetRequest
from ..speculative.draft import accepted_length
from ..speculative.drafters import make_drafter


class TextDrafts:
    """The drafter's state over one simulated rollout of a recorded text. ``texts``: each sample's
    recorded output by (group, sample index) of the trace; ``prompts``: each group's prompt tokens."""

    def __init__(self, texts: Mapping[tuple[int, int], Sequence[int]], prompts: Mapping[int, Sequence[int]],
                 drafter: str = DRAFT.drafter, draft_tokens: int = DRAFT.draft_tokens,
                 draft_paths: int = DRAFT.draft_paths):
        self.texts = texts
        self.draft_tokens, self.draft_paths = draft_tokens, draft_paths
        self.drafter = make_drafter(drafter)
        self.fed: dict[str, int] = {}  # rid -> output tokens the drafter holds
        for group, prompt in prompts.items():
            self.drafter.register_group(f"g{group}", list(prompt))

    def covers(self, keys: Sequence[tuple[int, int] | None]) -> bool:
        return all(key in self.texts for key in keys)

    def feed(self, key: tuple[int, int], rid: str, generated: int) -> None:
        """The sample's output up to ``generated`` tokens, as its instance commits them."""
        start = self.fed.get(rid, 0)
        if generated > start:
            self.fed[rid] = self.drafter.update(f"g{key[0]}", rid, start, list(self.texts[key][start:generated]))

    def verify(self, requests: Sequence[tuple[tuple[int, int], str, int]], high: Sequence[bool],
               budget) -> tuple[list[int], list[int], int]:
        """One verify step over ``requests`` ((group, index), rid, output tokens committed), with the
        draft length ``budget`` (an instance's ``AdaptiveBudget`` or a ``DraftBudget``) picks for the
        batch: the tokens each request commits (its accepted path and the bonus token, up to its text's
        end), the drafts each verified, and the draft length the step ran at."""
        drafts, orders, asks = [], [], []
        for (key, rid, _), h in zip(requests, high):
            draft = self.drafter.draft(f"g{key[0]}", rid, self.draft_tokens, self.draft_paths)
            order = draft.best_first()
            scores = draft.node_scores()
            drafts.append(draft)
            orders.append(order)
            asks.append(BudgetRequest(rid, h, [scores[i] for i in order]))
        gamma = budget.gamma_star(len(requests))
        given = budget.allocate(asks, len(requests), gamma).per_request if gamma else {}
        made, verified = [], []
        for (key, rid, pos), draft, order in zip(requests, drafts, orders):
            k = min(given.get(rid, 0), len(draft))
            kept = draft if k == len(draft) else draft.keep(order[:k])
            text = self.texts[key]
            made.append(max(1, min(len(text) - pos, 1 + accepted_length(kept, text[pos:]))))
            verified.append(k)
        return made, verified, gamma
