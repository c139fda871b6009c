"""Penalties over a sample's whole output, although each chunk is a new SGLang request.

SGLang's penalizers (frequency, presence, repetition) count a request's own output tokens. A
continuation chunk carries the sample's earlier output as input, so on its own it would penalize only
the tokens of this chunk. The frontend marks how many input tokens are earlier output
(``wire.PRIOR_OUTPUT_PARAM``); when a penalizer prepares its rows, this hook counts those tokens in,
exactly as SGLang would have counted them had the sample run as one request.

Which tokens SGLang has counted by a given step depends on its scheduler. Without overlap (CPU with
speculation, or ``--disable-overlap-schedule``) the token sampled last is counted before the next step,
and a chunked sample is penalized exactly like the unchunked one. Under the overlap scheduler the
count usually trails by a step (a step's results are processed after the next one starts, so its
first decode step counts the prompt's last token instead); the seed follows that rule. SGLang does
not trail when it processes a result before launching the next batch (consecutive prefills), so
under overlap plain SGLang's own penalties depend on batch timing and equality is not exact.
``min_tokens`` needs no hook: the frontend sends each chunk what is left of it.
"""

from __future__ import annotations

import torch

from ..wire import prior_output

PENALTY = "sglang.srt.sampling.penaltylib"
TARGETS = {
    f"{PENALTY}.frequency_penalty.BatchedFrequencyPenalizer._prepare": "frequency",
    f"{PENALTY}.presence_penalty.BatchedPresencePenalizer._prepare": "presence",
    f"{PENALTY}.repetition_penalty.BatchedRepetitionPenalizer._prepare": "repetition",
}


def earlier_output(input_ids, prior: int, trailing: bool) -> list[int]:
    """The input tokens to count as output for a chunk whose input ends with ``prior`` output tokens.

    ``trailing``: the overlap scheduler's count, which at the chunk's first token covers the prompt's
    last token and all earlier output but the last token.
    """
    if prior <= 0 or prior >= len(input_ids):
        return []
    end = len(input_ids) - 1 if trailing else len(input_ids)
    return list(input_ids[end - prior:end])


def seed_earlier_output(result, penalizer, *args, kind: str, **kwargs):
    """AFTER hook on a penalizer's ``_prepare``: count each continuation's earlier output in its row."""
    from sglang.srt.runtime_context import get_schedule

    trailing = not get_schedule().disable_overlap_schedule
    for row, req in enumerate(penalizer.orchestrator.reqs()):
        tokens = earlier_output(req.origin_input_ids, prior_output(req.sampling_params.custom_params), trailing)
        if not tokens:
            continue
        ids = torch.tensor(tokens, dtype=torch.int64, device=penalizer.orchestrator.device)
        if kind == "frequency":
            cumulated, value = penalizer.cumulated_frequency_penalties, penalizer.frequency_penalties[row]
            cumulated[row].index_add_(0, ids, value.expand(len(tokens)))
        elif kind == "presence":
            penalizer.cumulated_presence_penalties[row, ids] = penalizer.presence_penalties[row]
        else:
            penalizer.cumulated_repetition_penalties[row, ids] = penalizer.repetition_penalties[row]
    return result


def register_hooks() -> None:
    from functools import partial

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for target, kind in TARGETS.items():
        HookRegistry.register(target, partial(seed_earlier_output, kind=kind), HookType.AFTER)
