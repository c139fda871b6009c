"""BENCHMARKS ONLY. A SGLang custom logit processor that ends a sample at a hidden target length.

The target travels in the request's ``custom_params`` (opaque to every scheduler) as the total
sequence length at which the sample must end: ``{"end_at": prompt_len + target, "eos": id}``.
It bans EOS before that length and forces it as the token that reaches it, so every sample has
exactly its target length, also when chunked (a continuation is prefilled with prompt + earlier
chunks, so the total length is what counts). Under speculative decoding each verify-tree node is
a row of its own, ``__draft_depth__`` tokens past the request's committed length. A row without a
depth is SGLang's own prefill or decode step: under the overlap scheduler ``output_ids`` may still
lack the previous step's token there, so the length is the KV allocated for the step's input.

With ``"replay": [ids]`` (the sample's whole recorded output, ending in EOS, so ``end_at`` is the
prompt length plus its length) every position is forced to the recorded token instead: a model with
the recording's vocabulary then emits exactly that text, whatever its weights. Emulated benchmarks
run a tiny random model this way over SmolLM2's recorded outputs, so drafts are accepted exactly
when they match real text (at any temperature a one-hot distribution accepts a draft token only if
it is the recorded one), while steps cost what the emulated profile says.

Instances must run with ``--enable-custom-logit-processor``.
"""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.sampling.custom_logit_processor import CustomLogitProcessor

from ..wire import DEPTH_PARAM, REQ_PARAM


def row_length(req, depth: int | None) -> int:
    """Tokens before the one this row samples: committed + draft depth on a verify row; on SGLang's
    own step, the KV allocated for it (its input token included), which the overlap scheduler keeps
    current while ``output_ids`` trails by one step."""
    if depth is not None:
        return len(req.origin_input_ids) + len(req.output_ids) + int(depth)
    kv = getattr(req, "kv", None)
    allocated = kv.kv_allocated_len if kv is not None else 0
    return max(allocated, len(req.origin_input_ids) + len(req.output_ids))


class ForceLengthProcessor(CustomLogitProcessor):
    def __call__(self, logits: torch.Tensor, custom_param_list: list[dict[str, Any]] | None = None) -> torch.Tensor:
        # Rows are sorted out in Python, then written with three tensor ops for the whole batch: a verify
        # step has a row per tree node, and an op per row would cost the host more than the step.
        forced_rows, forced_ids, banned_rows, banned_ids = [], [], [], []
        for row, params in enumerate(custom_param_list or []):
            if not params or "end_at" not in params:
                continue
            req = params.get(REQ_PARAM)
            if req is None:
                continue
            length = row_length(req, params.get(DEPTH_PARAM))
            eos, end_at = int(params["eos"]), int(params["end_at"])
            replay = params.get("replay")
            if replay:
                position = length - (end_at - len(replay))
                forced_rows.append(row)
                forced_ids.append(replay[position] if 0 <= position < len(replay) else eos)
            elif length + 1 >= end_at:
                forced_rows.append(row)
                forced_ids.append(eos)
            else:  # no natural EOS before the target either
                banned_rows.append(row)
                banned_ids.append(eos)
        if banned_rows:
            logits[torch.tensor(banned_rows, device=logits.device),
                   torch.tensor(banned_ids, device=logits.device)] = -float("inf")
        if forced_rows:
            rows = torch.tensor(forced_rows, device=logits.device)
            logits[rows] = -float("inf")
            logits[rows, torch.tensor(forced_ids, device=logits.device)] = 0.0
        return logits


def custom_params(prompt_len: int, target: int, eos_id: int, replay: list[int] | None = None) -> dict:
    """The params of one sample: its target length, or with ``replay`` its recorded output (whose
    length is then the target)."""
    if replay:
        return {"end_at": prompt_len + len(replay), "eos": eos_id, "replay": list(replay)}
    return {"end_at": prompt_len + target, "eos": eos_id}
