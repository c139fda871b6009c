"""Grouped speculative decoding in the simulator: how likely drafts are accepted, and what verifying costs.

The draft budget itself is the engine's: ``seer_sglang.speculative.budget.DraftBudget`` decides per step how
many drafts each request verifies, from the same kind of scores the drafters give (the probability
that the path to a draft token is accepted).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..speculative.budget import CostModel, DraftBudget
from ..core.step_model import StepModel


@dataclass(frozen=True)
class SpecModel:
    """A draft token is accepted with probability ``own_alpha`` while a request drafts from its own
    history, rising linearly to ``group_alpha`` as its siblings finish (the group-suffix drafter then
    holds their whole outputs); ``grouped=False`` is the per-request ``suffix`` ablation. A verified
    token costs ``verify_per_token_s`` per request on top of the decode step (default: the step
    model's prefill cost per token, an upper bound on a GPU, where verify tokens ride on a
    memory-bound decode step)."""

    own_alpha: float = 0.45
    group_alpha: float = 0.75
    grouped: bool = True
    gamma_max: int = 8
    lam: float = 2.0
    verify_per_token_s: float | None = None

    def alpha(self, finished_siblings: int, group_size: int) -> float:
        if not self.grouped or group_size <= 1:
            return self.own_alpha
        share = finished_siblings / (group_size - 1)
        return self.own_alpha + (self.group_alpha - self.own_alpha) * min(1.0, share)

    def draft_scores(self, alpha: float) -> list[float]:
        return list(CostModel.geometric_curve(alpha, self.gamma_max))

    def token_cost(self, model: StepModel) -> float:
        return model.prefill_per_token_s if self.verify_per_token_s is None else self.verify_per_token_s

    def budget(self, model: StepModel) -> DraftBudget:
        """The engine's budget over this model's costs: a one-token verify step is a decode step."""
        per_token = self.token_cost(model)
        cost = CostModel(model.decode_base_s + model.weight_read_s, max(0.0, model.decode_per_seq_s - per_token),
                         per_token,
                         CostModel.geometric_curve((self.own_alpha + self.group_alpha) / 2, self.gamma_max))
        return DraftBudget(cost, self.gamma_max, self.lam)
