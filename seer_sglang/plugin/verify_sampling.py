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

from ..wire import DEPTH_PARAM


@dataclass
class _VerifyStep:
    """What the seeded draws need from the verify step's sampling call."""

    logits: torch.Tensor  # [bs * d, vocab], after SGLang's penalties and masks (edited in place)
    sampling_info: Any
    positions: torch.Tensor  # [bs * d] absolute position of each node's input token
    draft_token_num: int
    tree_topk: int
    rows: torch.Tensor | None = None  # the tree nodes in use (a compacted verify), None = all


_installed = False


def draft_depths(positions: torch.Tensor, seq_lens: torch.Tensor, draft_token_num: int) -> torch.Tensor:
    """Depth of every tree node (0 = the last verified token): its position past the request's length."""
    return positions.view(-1, draft_token_num) - seq_lens.view(-1, 1).to(positions.dtype)


def apply_custom_processors(logits: torch.Tensor, sampling_info, depths: torch.Tensor,
                            used: torch.Tensor | None = None) -> None:
    """SGLang's ``apply_custom_logit_processor`` for verify rows, with each row's draft depth; with
    ``used`` (the nodes of a compacted verify) only on those, since nothing reads the other rows."""
    d = depths.shape[1]
    depth_rows = depths.tolist()
    live = None
    if used is not None:
        live = torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
        live[used] = True
    for entry in sampling_info.custom_logit_processor.values():
        if not entry.rows:
            continue
        rows = (entry.indices.view(-1, 1) * d + torch.arange(d, device=entry.indices.device)).flatten()
        nodes = [(i, depth) for i in entry.rows for depth in depth_rows[i]]
        if live is not None:
            keep = live[rows]
            rows = rows[keep]
            nodes = [node for node, k in zip(nodes, keep.tolist()) if k]
            if not nodes:
                continue
        params = [{**(sampling_info.custom_params[i] or {}), DEPTH_PARAM: depth} for i, depth in nodes]
        result = entry.processor(logits.index_select(0, rows), params)
        logits.index_copy_(0, rows, result.to(logits.dtype))


def seeded_draws(step: _VerifyStep) -> torch.Tensor:
    """[bs, d] tokens: what SGLang's seeded sampler draws at each node, as in a plain decode step."""
    from sglang.kernels.ops.sampling import softmax as sampler_softmax
    from sglang.srt.layers.sampler import sampling_from_probs_torch, top_k_top_p_min_p_sampling_from_probs_torch

    info, d, rows = step.sampling_info, step.draft_token_num, step.rows

    def per_node(values: torch.Tensor) -> torch.Tensor:
        values = torch.repeat_interleave(values, d, dim=0)
        return values if rows is None else values[rows]

    # Rows are independent draws: the nodes in use give the same tokens alone as in the full layout.
    logits = step.logits if rows is None else step.logits[rows]
    positions = step.positions if rows is None else step.positions[rows]
    probs = sampler_softmax(logits / per_node(info.temperatures))
    seeds = per_node(info.sampling_seed)
    if not (info.need_top_p_sampling or info.need_top_k_sampling or info.need_min_p_sampling):
        tokens = sampling_from_probs_torch(probs, sampling_seed=seeds, positions=positions)
    else:
        tokens = top_k_top_p_min_p_sampling_from_probs_torch(
            probs, per_node(info.top_ks), per_node(info.top_ps), per_node(info.min_ps), info.need_min_p_sampling,
            seeds, positions)
    if rows is not None:  # unused nodes are never visited by the tree walk
        tokens = torch.zeros(step.logits.shape[0], dtype=tokens.dtype, device=tokens.device).index_copy_(
            0, rows, tokens)
    return tokens.view(-1, d)


def install() -> None:
    """Wrap SGLang's verify sampling (module attributes, in the scheduler process of a SEER server)."""
    global _installed
    if _installed:
        return
    import sglang.srt.speculative.eagle_utils as eagle_utils
    import sglang.srt.speculative.ngram_worker as ngram_worker

    original_sample = ngram_worker.eagle_sample

    def eagle_sample(verify_input, batch, logits_output, *args, **kwargs):
        """Seeded requests take SGLang's greedy tree walk with the seeded draws in place of the
        argmax: its rejection branch would first build target probabilities, a zero draft
        distribution and coins over every row of the layout, none of which the draws use."""
        info, d = batch.sampling_info, verify_input.draft_token_num
        rows = verify_input.__dict__.pop("sampled_nodes", None)  # set by a compacted verify, read once
        logits = logits_output.next_token_logits
        if info.has_custom_logit_processor and not batch.forward_mode.is_idle():
            apply_custom_processors(logits, info, draft_depths(verify_input.positions, batch.seq_lens, d), rows)
        if info.is_all_greedy or info.sampling_seed is None:
            return original_sample(verify_input, batch, logits_output, *args, **kwargs)
        step = _VerifyStep(logits, info, verify_input.positions, d, verify_input.tree_topk, rows)
        greedy_rule, greedy_walk = eagle_utils._verify_uses_greedy, eagle_utils.verify_tree_greedy_func

        def seeded_walk(**kw):
            return greedy_walk(**{**kw, "target_predict": seeded_draws(step)})

        eagle_utils._verify_uses_greedy = lambda **_: True
        eagle_utils.verify_tree_greedy_func = seeded_walk
        try:
            return original_sample(verify_input, batch, logits_output, *args, **kwargs)
        finally:
            eagle_utils._verify_uses_greedy, eagle_utils.verify_tree_greedy_func = greedy_rule, greedy_walk

    ngram_worker.eagle_sample = eagle_sample
    _installed = True
