"""The benchmarks' hidden-target processor: a target length, or a recorded text to replay."""

from types import SimpleNamespace

import torch

from seer_sglang.benchmarking.force_length import ForceLengthProcessor, custom_params
from seer_sglang.wire import DEPTH_PARAM, REQ_PARAM

EOS = 2
PROMPT = [5, 6, 7]


def _rows(params: dict, rows: list[tuple[list[int], int | None]]) -> torch.Tensor:
    """The processor's choice for each (output so far, draft depth) row of one request."""
    logits = torch.zeros(len(rows), 50)
    plist = [{**params, REQ_PARAM: SimpleNamespace(origin_input_ids=PROMPT, output_ids=out, kv=None),
              DEPTH_PARAM: depth} for out, depth in rows]
    for p in plist:
        if p[DEPTH_PARAM] is None:
            del p[DEPTH_PARAM]
    return ForceLengthProcessor()(logits, plist)


def test_replay_forces_each_recorded_token_then_eos():
    text = [11, 12, 13, EOS]
    params = custom_params(len(PROMPT), 99, EOS, replay=text)  # the recording's length is the target
    assert params["end_at"] == len(PROMPT) + len(text)
    rows = [([], None), ([11], None), ([11, 12], None), ([11, 12, 13], None), ([11, 12, 13, EOS], None)]
    out = _rows(params, rows)
    assert out.argmax(-1).tolist() == [11, 12, 13, EOS, EOS]
    assert torch.isinf(out).sum(-1).tolist() == [49] * len(rows)  # one-hot: any temperature draws it


def test_replay_on_verify_rows_follows_the_draft_depth():
    """A verify-tree node ``d`` tokens past the committed output samples the recorded token there, so a
    draft is accepted exactly when it matches the text."""
    text = [21, 22, 23, 24, EOS]
    out = _rows(custom_params(len(PROMPT), 0, EOS, replay=text), [([21], 0), ([21], 1), ([21], 2), ([21], 3)])
    assert out.argmax(-1).tolist() == [22, 23, 24, EOS]


def test_target_length_bans_eos_until_the_end():
    out = _rows(custom_params(len(PROMPT), 3, EOS), [([], None), ([9, 9], None)])
    assert torch.isinf(out[0, EOS]) and not torch.isinf(out[0]).all()
    assert out[1].argmax().item() == EOS and torch.isinf(out[1]).sum().item() == 49
