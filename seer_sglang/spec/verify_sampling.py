"""Verify-step sampling for SEER: draft-independent tokens for seeded requests, and custom logit
processors on every node of the verify tree.

SGLang's seeded sampler draws the token at position p from Gumbel noise hashed from (seed, p). Our
drafts are deterministic (no proposal distribution), so for a seeded request the verifier can draw,
at every tree node, the token that plain decoding would draw at that node's position (with SGLang's
own sampling functions), then accept the path of drafts that matches those draws. Every emitted
token is then exactly the non-speculative token: the output does not depend on which drafts were
proposed, on which instance the sample ran or on how it was chunked, and each token is still an
exact draw from the target distribution. Unseeded requests keep SGLang's tree rejection sampling.

SGLang applies no custom logit processor when it verifies. Here each tree node's row goes through
its request's processor, with ``__draft_depth__`` added to the params (the node's distance from the
last verified token), so a processor that counts tokens sees the length its row stands for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

DEPTH_PARAM = "__draft_depth__"


@dataclass
class _VerifyStep:
    """What the tree sampler needs from the verify call that wraps it (same scheduler thread)."""

    logits: torch.Tensor  # [bs * d, vocab], after SGLang's penalties and masks (edited in place)
    sampling_info: Any
    positions: torch.Tensor  # [bs * d] absolute position of each node's input token
    draft_token_num: int
    tree_topk: int


_step: _VerifyStep | None = None
_installed = False


def draft_depths(positions: torch.Tensor, seq_lens: torch.Tensor, draft_token_num: int) -> torch.Tensor:
    """Depth of every tree node (0 = the last verified token): its position past the request's length."""
    return positions.view(-1, draft_token_num) - seq_lens.view(-1, 1).to(positions.dtype)


def apply_custom_processors(logits: torch.Tensor, sampling_info, depths: torch.Tensor) -> None:
    """SGLang's ``apply_custom_logit_processor`` for verify rows, with each row's draft depth."""
    d = depths.shape[1]
    depth_rows = depths.tolist()
    for entry in sampling_info.custom_logit_processor.values():
        if not entry.rows:
            continue
        rows = (entry.indices.view(-1, 1) * d + torch.arange(d, device=entry.indices.device)).flatten()
        params = [{**(sampling_info.custom_params[i] or {}), DEPTH_PARAM: depth}
                  for i in entry.rows for depth in depth_rows[i]]
        result = entry.processor(logits.index_select(0, rows), params)
        logits.index_copy_(0, rows, result.to(logits.dtype))


def seeded_draws(step: _VerifyStep) -> torch.Tensor:
    """[bs, d] tokens: what SGLang's seeded sampler draws at each node, as in a plain decode step."""
    from sglang.kernels.ops.sampling import softmax as sampler_softmax
    from sglang.srt.layers.sampler import sampling_from_probs_torch, top_k_top_p_min_p_sampling_from_probs_torch

    info, d = step.sampling_info, step.draft_token_num

    def per_node(values: torch.Tensor) -> torch.Tensor:
        return torch.repeat_interleave(values, d, dim=0)

    probs = sampler_softmax(step.logits / per_node(info.temperatures))
    seeds = per_node(info.sampling_seed)
    if not (info.need_top_p_sampling or info.need_top_k_sampling or info.need_min_p_sampling):
        tokens = sampling_from_probs_torch(probs, sampling_seed=seeds, positions=step.positions)
    else:
        tokens = top_k_top_p_min_p_sampling_from_probs_torch(
            probs, per_node(info.top_ks), per_node(info.top_ps), per_node(info.min_ps), info.need_min_p_sampling,
            seeds, step.positions)
    return tokens.view(-1, d)


def install() -> None:
    """Wrap SGLang's verify sampling (module attributes, in the scheduler process of a SEER server)."""
    global _installed
    if _installed:
        return
    import sglang.srt.speculative.eagle_utils as eagle_utils
    import sglang.srt.speculative.ngram_worker as ngram_worker

    original_sample = ngram_worker.eagle_sample
    original_tree_sampling = eagle_utils.tree_speculative_sampling_target_only

    def eagle_sample(verify_input, batch, logits_output, *args, **kwargs):
        global _step
        info, d = batch.sampling_info, verify_input.draft_token_num
        logits = logits_output.next_token_logits
        if info.has_custom_logit_processor and not batch.forward_mode.is_idle():
            apply_custom_processors(logits, info, draft_depths(verify_input.positions, batch.seq_lens, d))
        seeded = not info.is_all_greedy and info.sampling_seed is not None
        _step = _VerifyStep(logits, info, verify_input.positions, d, verify_input.tree_topk) if seeded else None
        try:
            return original_sample(verify_input, batch, logits_output, *args, **kwargs)
        finally:
            _step = None

    def tree_sampling(**kw):
        if _step is None:
            return original_tree_sampling(**kw)
        eagle_utils.verify_tree_greedy_func(
            predicts=kw["predicts"], accept_index=kw["accept_index"], accept_token_num=kw["accept_token_num"],
            candidates=kw["candidates"], retrieve_index=kw["retrive_index"],
            retrieve_next_token=kw["retrive_next_token"], retrieve_next_sibling=kw["retrive_next_sibling"],
            target_predict=seeded_draws(_step), topk=_step.tree_topk)

    ngram_worker.eagle_sample = eagle_sample
    eagle_utils.tree_speculative_sampling_target_only = tree_sampling
    _installed = True
