"""A SGLang custom logit processor that ends a sample at a hidden target length (benchmarks).

The target travels in the request's ``custom_params`` (opaque to every scheduler) as the total
sequence length at which the sample must end: ``{"end_at": prompt_len + target, "eos": id}``.
It bans EOS before that length and forces it as the token that reaches it, so every sample has
exactly its target length, also when chunked (a continuation is prefilled with prompt + earlier
chunks, so the total length is what counts). Under speculative decoding each verify-tree node is
a row of its own, ``__draft_depth__`` tokens past the request's committed length.

Instances must run with ``--enable-custom-logit-processor``.
"""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.sampling.custom_logit_processor import CustomLogitProcessor


class ForceLengthProcessor(CustomLogitProcessor):
    def __call__(self, logits: torch.Tensor, custom_param_list: list[dict[str, Any]] | None = None) -> torch.Tensor:
        for row, params in enumerate(custom_param_list or []):
            if not params or "end_at" not in params:
                continue
            req = params.get("__req__")
            if req is None:
                continue
            length = len(req.origin_input_ids) + len(req.output_ids) + int(params.get("__draft_depth__", 0))
            eos = int(params["eos"])
            if length + 1 >= int(params["end_at"]):
                logits[row, :] = -float("inf")
                logits[row, eos] = 0.0
            else:
                logits[row, eos] = -float("inf")  # no natural EOS before the target either
        return logits


def custom_params(prompt_len: int, target: int, eos_id: int) -> dict[str, int]:
    return {"end_at": prompt_len + target, "eos": eos_id}
