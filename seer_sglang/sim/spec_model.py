"""Grouped speculative decoding in the simulator: how likely drafts are accepted, and what verifying costs.

On the text a run replays, acceptance is not modelled at all: the simulator drafts the text itself
(``text_drafts``). The curves here serve workloads without a text (the 32-instance tables).

The draft budget itself is the engine's: ``seer_sglang.speculative.budget.DraftBudget`` decides per step how
many drafts each request verifies, from the same kind of scores the drafters give (the probability
that the path to a draft token is accepted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..config import DRAFT
from ..speculative.budget import CostModel, DraftBudget, make_budget
from ..core.step_model import StepModel
from .text_drafts import TextDrafts


def length_for_alpha(alpha: float, gamma: int) -> float:
    """Mean tokens per verify step of a chain of ``gamma`` drafts each accepted with ``alpha``."""
    return sum(alpha ** i for i in range(gamma + 1))


def alpha_for_length(length: float, gamma: int) -> float:
    """The per-token acceptance probability whose chain of ``gamma`` drafts gives a mean of ``length``
    tokens per verify step (bonus token included): ``(1 - a**(gamma+1)) / (1 - a) = length``."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if length_for_alpha(mid, gamma) < length:
            lo = mid
        else:
            hi = mid
    return lo


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
    # Measured instead of assumed: (share of siblings finished, acceptance probability) points, linear
    # between them (``from_replay``); empty: the two alphas above.
    measured: tuple[tuple[float, float], ...] = ()
    source: str = "assumed"
    # On a replayed text: each sample's own tokens per verify step, by (group, sibling) of the workload,
    # which replaces the curve for that sample (``sample_alpha``).
    sample_lengths: Mapping[tuple[int, int], float] = field(default_factory=dict)
    # The replayed text itself, where the run names it: each sample's recorded output by (group, sibling)
    # and each group's prompt. The simulator then drafts it step by step with the instances' drafter and
    # budget (``TextDrafts``) instead of taking the acceptance above.
    texts: Mapping[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    prompts: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    drafter: str = DRAFT.drafter
    draft_paths: int = DRAFT.draft_paths
    # The instances' draft budget (``config.BUDGETS``): ``full`` verifies every draft at every batch
    # size, as the GPU path does today (its verify width is fixed).
    budget_name: str = DRAFT.budget
    # The instances' verify layout (``--verify-layout``; ``auto`` verifies ragged, as on a CPU or an
    # emulated instance): ``bucketed`` pads every request of a step to
    # the step's bucket (``speculative.budget.verify_buckets``), and the padding is computed too.
    verify_layout: str = DRAFT.verify_layout
    # Whether the adaptive budget counts the batch's KV read as memory time (``CostModel``), as the
    # engine's does; False rebuilds runs made before it did.
    budget_kv_read: bool = True
    # How long a token committed on one instance takes to reach the others' drafters: the writer's
    # next sync round pushes it to the draft server, the reader's next one fetches it (each every
    # ``sync_interval_s``, so one interval on average).
    sync_lag_s: float = DRAFT.sync_interval_s

    def alpha(self, finished_siblings: int, group_size: int) -> float:
        if not self.grouped:
            return self.own_alpha
        share = 0.0 if group_size <= 1 else min(1.0, finished_siblings / (group_size - 1))
        if self.measured:
            points = sorted(self.measured)
            if share <= points[0][0]:
                return points[0][1]
            for (x0, a0), (x1, a1) in zip(points, points[1:]):
                if share <= x1:
                    return a0 + (a1 - a0) * (share - x0) / (x1 - x0)
            return points[-1][1]
        return self.own_alpha + (self.group_alpha - self.own_alpha) * share

    def sample_alpha(self, alpha: float, key: tuple[int, int] | None) -> float:
        """``alpha`` for the sample ``key`` of a replayed text: the sample's own acceptance, measured
        with its group decoding together, where the replay has it; else ``alpha`` (the curve by
        finished siblings). Samples draft better or worse than the text's mean (the long ones are often
        repetitions, and draft better), and the rollout ends on the ones that draft worst, which the
        curve averages out. The sample's own figure already spans its siblings finishing around it,
        and the curve's fall with finished siblings is mostly which samples are left (those that draft
        worst), so the two are not multiplied: that would count the fall twice for the last samples."""
        length = self.sample_lengths.get(key) if key is not None and self.grouped else None
        if not length:
            return alpha
        return alpha_for_length(min(self.gamma_max + 0.999, max(1.0, length)), self.gamma_max)

    @classmethod
    def from_replay(cls, path: str | Path, drafter: str = DRAFT.drafter, seed: int | None = None,
                    text: str | None = None, **kwargs) -> "SpecModel":
        """Acceptance measured on real text: a ``benchmarks.draft_replay --references`` result, whose
        tokens per verify step with n finished siblings (n = 0 .. G-1) become acceptance probabilities
        at sibling share n / (G-1). Where the file has it, the curve is the one measured with the whole
        group decoding at once (``acceptance_by_finished``), as instances decode it: running siblings'
        tokens are drafts too, so with none finished it is well above a lone sample's. Where ``text`` is
        the recording the file was measured on, the model holds that text, and the simulator drafts it
        (``TextDrafts``) rather than taking these figures."""
        data = json.loads(Path(path).read_text())
        curves = data.get("acceptance_by_finished") or data["acceptance_by_references"]
        by_n = {int(n): length for n, length in curves[drafter].items()}
        gamma = int(data["config"].get("draft_tokens", cls.gamma_max))
        top = max(by_n) or 1
        points = tuple((n / top, alpha_for_length(length, gamma)) for n, length in sorted(by_n.items()))
        # The per-request ablation (grouped=False) drafts from a request's own history: the ``suffix``
        # drafter's acceptance on the same text, where the file has it.
        own = data.get("acceptance_together", {}).get("suffix")
        own_alpha = alpha_for_length(own, gamma) if own else points[0][1]
        # ``text``: the recording the workload of ``seed`` replays (``benchmarks.rollout --replay``). Where
        # it is the one this file was measured on, the workload is that text sample for sample, and each
        # sample keeps its own acceptance (``acceptance_by_sample``, keyed seed:group:sibling).
        per_sample: dict[tuple[int, int], float] = {}
        same_text = seed is not None and bool(text) and data["config"].get("outputs") == text
        if same_text:
            for key, length in data.get("acceptance_by_sample", {}).get(drafter, {}).items():
                s, g, i = (int(x) for x in key.split(":"))
                if s == seed:
                    per_sample[(g, i)] = length
        # The text itself, to draft step by step, on the same condition: a curve measured on another
        # text is what a run that names it asks for.
        texts, prompts = recorded_text(text, seed) if same_text else ({}, {})
        how = "drafted over the replayed text" if texts else "per sample" if per_sample else ""
        return cls(own_alpha=own_alpha, group_alpha=points[-1][1], gamma_max=gamma, measured=points,
                   source=f"measured: {path} ({drafter}{', ' + how if how else ''})",
                   sample_lengths=per_sample, texts=texts, prompts=prompts, drafter=drafter,
                   draft_paths=int(data["config"].get("draft_paths", cls.draft_paths)), **kwargs)

    def text_drafts(self, instances: int = 1) -> TextDrafts | None:
        """Fresh drafters over the replayed text for one simulated rollout, a replica per instance; None
        without the text. The per-request ablation (``grouped=False``) drafts with ``suffix``, as its
        instances do."""
        if not self.texts:
            return None
        return TextDrafts(self.texts, self.prompts, self.drafter if self.grouped else "suffix", self.gamma_max,
                          self.draft_paths, instances, self.sync_lag_s)

    def draft_scores(self, alpha: float) -> list[float]:
        return list(CostModel.geometric_curve(alpha, self.gamma_max))

    def token_cost(self, model: StepModel) -> float:
        """A verified draft token's cost beyond the step. A model that prices compute per token
        (``compute_per_token_s``: a GPU profile) counts verify tokens in the step itself, as the emulated
        instances do; a CPU fit does not, so each costs a prefill token."""
        if self.verify_per_token_s is not None:
            return self.verify_per_token_s
        return 0.0 if model.compute_per_token_s else model.prefill_per_token_s

    def budget(self, model: StepModel):
        """The engine's budget over this model's costs (``CostModel.from_step_model``: a GPU profile's
        roofline, as an emulated instance's budget has it, or a CPU fit's linear step); with
        ``budget_name`` other than adaptive, that budget (``make_budget``)."""
        if self.budget_name != "adaptive":
            return make_budget(self.budget_name, self.gamma_max)
        curve = CostModel.geometric_curve((self.own_alpha + self.group_alpha) / 2, self.gamma_max)
        return DraftBudget(CostModel.from_step_model(model, curve, self.verify_per_token_s, self.budget_kv_read),
                           self.gamma_max, self.lam)


def recorded_text(path: str | Path, seed: int) -> tuple[dict, dict]:
    """A ``benchmarks.record_text`` recording's outputs for the workload of ``seed``, by (group, sample
    index), and its groups' prompts; empty where the file has no such workload (or is no recording)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}, {}
    workload = next((w for w in data.get("workloads", []) if w.get("seed") == seed), None)
    if workload is None:
        return {}, {}
    texts = {(g, i): tuple(out) for g, group in enumerate(workload["groups"]) for i, out in enumerate(group["outputs"])}
    return texts, {g: tuple(group["prompt"]) for g, group in enumerate(workload["groups"])}
