"""docs/benchmarks.md holds the tables the stored runs (benchmarks/results/manifest.json) give (``python -m benchmarks.tables``)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from benchmarks import tables  # noqa: E402
from benchmarks.harness import manifest  # noqa: E402
from benchmarks.tables import DOCS, TABLES, marked, render, rollout_table  # noqa: E402


def test_the_docs_and_the_manifest_are_up_to_date():
    """``python -m benchmarks.tables --check``: every table as the runs give it, each doc holding the runs
    of its status, and the manifest's ``quoted_in`` as the docs quote the runs."""
    assert tables.main(["--check"]) == 0, "run: python -m benchmarks.tables"


def test_every_table_is_placed_once():
    names = [n for doc in DOCS for n in marked(doc.read_text())]
    assert sorted(names) == sorted(TABLES)


def test_the_manifest_lists_every_run_folder_once():
    runs = manifest.read()
    folders = {p.parent for p in manifest.RESULTS.glob("*/*/result.json")}
    assert sorted(e.folder for e in runs) == sorted(folders)
    labels = [e.label for e in runs]
    assert len(labels) == len(set(labels))
    by = {e.label: e for e in runs}
    for e in runs:
        assert e.status in manifest.STATUSES and e.kind in ("result", "recording")
        assert e.folder.name.endswith(f"-{e.label}") and e.folder.parent.name == e.benchmark
        assert all((e.folder / name).is_file() for name in e.former), e.label
        if e.status == "superseded":
            assert by[e.superseded_by].status == "current" and e.why, e.label
            assert any(q.startswith("docs/benchmarks-archive.md") for q in e.quoted_in), e.label
        else:
            assert e.superseded_by is None
    assert len(list(manifest.RESULTS.glob("*.json"))) == 1  # the manifest: nothing stored flat any more


def test_a_table_notes_the_runs_it_reads():
    results = tables.Read({"a": {"x": 1}, "b": {"x": 2}})
    assert results["a"]["x"] == 1 and results.get("c") is None
    assert results.read == {"a"}


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
    assert "CPU-measured" in lines[-1] and "one run" in lines[-1] and "`benchmarks/results/a/`" in lines[-1]


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


def test_the_glance_table_leads_with_current_runs_only(monkeypatch):
    """One line per headline of the manifest, in its order; a headline on a run that is no longer
    current, or one drawing on such a run, is an error rather than a stale line."""
    from benchmarks.tables.glance import glance_table

    results = tables.load_results()
    entries = manifest.read()
    headlined = sorted((e for e in entries if e.headline), key=lambda e: e.headline["order"])
    rows = glance_table(results).splitlines()[2:]
    assert len(rows) == len(headlined) >= 4
    assert all(row.startswith(f"| {e.headline['what']} |") for row, e in zip(rows, headlined))
    stale = headlined[0].label
    monkeypatch.setattr(manifest, "by_label", lambda status=None, **kw: {
        e.label: e for e in entries if e.label != stale})
    with pytest.raises(ValueError, match=stale):
        glance_table(results)
