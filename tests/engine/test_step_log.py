"""The emulated instances' step log and the tool that reads it (``benchmarks.step_log``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from benchmarks.step_log import continuation_gaps, instance_stats, load, rollouts
from seer_sglang.plugin.emulation import step_record


class Mode:
    def __init__(self, kind: str):
        self.kind = kind

    def is_target_verify(self):
        return self.kind == "verify"

    def is_extend(self):
        return self.kind in ("prefill", "verify")


def batch(kind: str, rids: list[str], seq_lens: list[int], extend=None, prefix=None, input_ids=None):
    return SimpleNamespace(forward_mode=Mode(kind), reqs=[SimpleNamespace(rid=r) for r in rids],
                           seq_lens_cpu=torch.tensor(seq_lens), extend_lens=extend, prefix_lens=prefix,
                           input_ids=input_ids)


def step(t, kind, rids, model_s=1.0, late_s=-0.5):
    return {"t": t, "kind": kind, "model_s": model_s, "late_s": late_s, "rids": rids, "kv": 0}


def test_a_step_record_names_the_batch_it_ran():
    decode = step_record(batch("decode", ["a", "b"], [10, 12]), 0.3, -0.1, 5.0)
    assert decode == {"t": 5.0, "kind": "decode", "model_s": 0.3, "late_s": -0.1, "rids": ["a", "b"], "kv": 22,
                      "lens": [10, 12]}
    prefill = step_record(batch("prefill", ["c"], [40], extend=[30], prefix=[10]), 0.05, 0.0, 6.0)
    assert prefill["kind"] == "prefill" and prefill["extend"] == [30] and prefill["prefix"] == [10]
    verify = step_record(batch("verify", ["a", "b"], [11, 13], input_ids=torch.zeros(9)), 0.4, 0.0, 7.0)
    assert verify["kind"] == "verify" and verify["tokens"] == 9  # both draft trees, roots included
    assert verify["lens"] == [11, 13] and "lens" not in prefill


def test_rollouts_are_told_apart_and_continuations_timed(tmp_path):
    """Plain SGLang's warm-up and measured rollout share rids and split where every instance was idle;
    seer chunks belong to their tagged mode; a continuation is timed from its chunk's last step."""
    one = [step(1, "prefill", ["b0-0", "b0-1"]), step(2, "decode", ["b0-0", "b0-1"]),  # warm-up
           step(20, "prefill", ["b0-0"]), step(21, "decode", ["b0-0"]),
           step(22, "decode", []), step(23, "prefill", ["b0-0"], late_s=0.2),  # retracted, then back
           step(50, "prefill", ["r0-context-3-1-c0"]), step(51, "decode", ["r0-context-3-1-c0"])]
    two = [step(21.5, "prefill", ["b1-0"]), step(53.5, "prefill", ["r0-context-3-1-c1"]),
           step(54, "decode", ["r0-context-3-1-c1", "warm-7-0-c0"]), step(55, "decode", ["r0-context-3-1-c1"])]
    for name, steps in (("run.11", one), ("run.12", two)):
        (tmp_path / name).write_text("".join(json.dumps(s) + "\n" for s in steps))
    logs, _ = load(str(tmp_path / "run"))
    found = rollouts(logs, baseline_rollouts=2)
    assert set(found) == {"baseline", "r0-context"}
    warm, measured = found["baseline"]
    assert [s["t"] for s in warm[str(tmp_path / "run.11")]] == [1, 2]
    assert [s["t"] for s in measured[str(tmp_path / "run.11")]] == [20, 21, 23]
    stats = instance_stats(measured[str(tmp_path / "run.11")])
    assert stats == {"span_s": 23 - 19, "decode_steps": 1, "decode_model_s": 1.0, "request_steps": 1,
                     "verify_steps": 0, "prefill_steps": 2, "prefill_model_s": 2.0, "prefilled_again": 1, "late_steps": 1}
    (context,) = found["r0-context"]
    assert continuation_gaps(context) == [pytest.approx(52.5 - 51)]  # from 51 to the start of the step ending 53.5


def test_tokens_committed_per_step_are_told_apart_by_where_the_chunk_came_from(tmp_path):
    """A request's length at its next decode step less this one's is what this step committed; a
    prefill of it between (a retraction) ends the count; chunks are first, stayed or moved."""
    def decode(t, rids, lens):
        return {**step(t, "verify", rids), "lens": lens}

    a = [step(1, "prefill", ["r0-context-3-1-c0"]),
         decode(2, ["r0-context-3-1-c0"], [10]), decode(3, ["r0-context-3-1-c0"], [12]),
         decode(4, ["r0-context-3-1-c0"], [13]),
         step(10, "prefill", ["r0-context-3-1-c2"]),
         decode(11, ["r0-context-3-1-c2"], [40]), decode(12, ["r0-context-3-1-c2"], [42])]
    b = [step(5, "prefill", ["r0-context-3-1-c1"]),
         decode(6, ["r0-context-3-1-c1"], [20]), decode(7, ["r0-context-3-1-c1"], [21]),
         step(7.5, "prefill", ["r0-context-3-1-c1"]),  # retracted and back: no count across it
         decode(8, ["r0-context-3-1-c1"], [30]), decode(9, ["r0-context-3-1-c1"], [34])]
    from benchmarks.step_log import committed_by_chunk_step

    found = committed_by_chunk_step({"run.1": a, "run.2": b})
    # c1 ran on the second instance after c0 on the first, and c2 back on the first: both moved
    assert {k: sorted(v) for k, v in found.items()} == {"first, step 1": [2], "first, step 2+": [1],
                                                         "moved, step 1": [1, 2], "moved, step 2+": [4]}


def test_request_arrivals_are_read_apart_from_steps_and_timed_from_the_first(tmp_path):
    """The step log's ``arrive`` records (a request reaching an instance's queue) are no steps; a
    rollout's arrivals count from its first, each rid's last arrival before its first step (the
    warm-up sends the same rids)."""
    from benchmarks.step_log import arrival_offsets

    def arrive(t, rid):
        return {"t": t, "kind": "arrive", "rids": [rid]}

    records = [arrive(1.0, "b0-0"), step(2, "prefill", ["b0-0"]),  # warm-up
               arrive(10.0, "b0-0"), arrive(10.3, "b0-1"), step(10.5, "prefill", ["b0-0", "b0-1"], model_s=0.1),
               step(11, "decode", ["b0-0", "b0-1"])]
    (tmp_path / "run.7").write_text("".join(json.dumps(r) + "\n" for r in records))
    steps, arrivals = load(str(tmp_path / "run"))
    assert [s["kind"] for s in steps[str(tmp_path / "run.7")]] == ["prefill", "prefill", "decode"]
    measured = {str(tmp_path / "run.7"): steps[str(tmp_path / "run.7")][1:]}
    assert arrival_offsets(arrivals, measured) == pytest.approx([0.0, 0.3])
