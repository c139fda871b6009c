"""docs/benchmarks.md holds the tables benchmarks/results/*.json give (``python -m benchmarks.tables``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from benchmarks.tables import DOC, TABLES, check, marked, render, rollout_table  # noqa: E402


def test_benchmarks_doc_is_up_to_date():
    stale = check()
    assert not stale, f"docs/benchmarks.md is out of date ({', '.join(stale)}): run python -m benchmarks.tables"


def test_every_table_is_placed_once():
    names = marked(DOC.read_text())
    assert sorted(names) == sorted(TABLES)


def _mode(completion_s: float, tokens: int, tail_s: float, retractions: int) -> dict:
    return {"completion_s": completion_s, "throughput_tok_s": tokens / completion_s, "tail_s": tail_s,
            "idle_s_per_instance": 1.0, "retractions": retractions, "output_tokens": tokens}


def _run(out: str, base_s: float, context_s: float) -> dict:
    return {"config": {"model": "tiny", "dtype": "float32", "instances": 2, "prompts": 4, "group_size": 2,
                       "max_tokens": 64, "chunk_size": 16, "kv_tokens": 1024, "machine": "CPU x86_64, 2 cores",
                       "out": out, "workload_spec": {"name": "moonlight", "mean_tokens": 30.0}},
            "modes": {"baseline": _mode(base_s, 1000, 4.0, 3), "context": _mode(context_s, 1000, 1.0, 0)}}


def test_rollout_table_renders_ratios_against_plain_sglang():
    text = rollout_table([_run("a.json", 10.0, 8.0)], ["a"])
    lines = text.split("\n")
    assert lines[0].startswith("| mode | completion | output tok/s | throughput vs plain SGLang |")
    assert lines[2] == "| plain SGLang | 10.0 s | 100.0 | 1.00x | 4.0 s | 1.00x | 1.0 s | 3 | 1,000 |"
    assert lines[3] == "| `context` | 8.0 s | 125.0 | 1.25x | 1.0 s | 0.25x | 1.0 s | 0 | 1,000 |"
    assert "CPU-measured" in lines[-1] and "one run" in lines[-1] and "`benchmarks/results/a.json`" in lines[-1]


def test_rollout_table_repeats_give_mean_and_spread():
    text = rollout_table([_run("a.json", 10.0, 8.0), _run("b.json", 10.0, 12.5)], ["a", "b"])
    context = next(line for line in text.split("\n") if line.startswith("| `context`"))
    # completion 8.0 and 12.5 s -> mean 10.25; throughput vs plain 1.25x and 0.80x -> mean 1.025
    assert context.startswith("| `context` | 10.2 s (8.0 s–12.5 s) | 102.5 (80.0–125.0) | 1.02x (0.80x–1.25x) |")
    assert "mean (min–max) over 2 runs" in text
    with pytest.raises(ValueError):
        other = _run("c.json", 10.0, 8.0)
        other["config"]["max_tokens"] = 128
        rollout_table([_run("a.json", 10.0, 8.0), other], ["a", "c"])


def test_render_replaces_only_between_markers():
    doc = "intro\n<!-- table:t -->\nold\n<!-- /table:t -->\noutro"
    new, changed = render(doc, {}, {"t": lambda results: "| a |\n|---|\n| 1 |"})
    assert new == "intro\n<!-- table:t -->\n\n| a |\n|---|\n| 1 |\n\n<!-- /table:t -->\noutro"
    assert changed == ["t"]
    assert render(new, {}, {"t": lambda results: "| a |\n|---|\n| 1 |"}) == (new, [])
    with pytest.raises(KeyError):
        render(doc, {}, {})
