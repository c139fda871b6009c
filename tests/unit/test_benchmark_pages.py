"""The benchmark pages are assembled from docs/sections/ by the status the manifest gives the runs each
section quotes (``benchmarks/tables/pages.py``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import tables  # noqa: E402
from benchmarks.harness import manifest  # noqa: E402
from benchmarks.tables import pages  # noqa: E402
from benchmarks.tables.format import ARCHIVE, DOC  # noqa: E402

RUNS = "benchmarks/results/rollout/2026-01-01-"


def _entry(label: str, status: str = "current", **kw) -> manifest.Entry:
    return manifest.Entry(path=RUNS + label, benchmark="rollout", label=label, kind="result", status=status,
                          regime="emulated", former=kw.pop("former", {}), **kw)


ENTRIES = {e.label: e for e in (
    _entry("a"),
    _entry("a_long", "superseded", superseded_by="a", why="a longer name that starts alike"),
    _entry("b", "superseded", former={"result.json": "benchmarks/results/b.json"}, superseded_by="a",
           why="an earlier run of the same command"),
    _entry("c", "superseded", superseded_by="a", why="read by a table only"),
    _entry("d", "superseded", superseded_by="a", why="an input only"),
)}

SECTIONS = {
    "0010-one.md": f"## One\n\nNames `a` and {RUNS}a/result.json; [three](#three), [nowhere](#nowhere).\n",
    "0020-two.md": f"### Two\n\n```bash\npython -m x --from {RUNS}d/result.json \\\n    --out {RUNS}a\n```\n",
    "0030-three.md": "### Three\n\n- a list:\n  ```bash\n  python -m x --out benchmarks/results/b.json\n  ```\n",
    "0040-four.md": "## Four\n\n<!-- table:t -->\n<!-- /table:t -->\n",
    "notes.txt": "not a section",
}
TABLES = {"t": lambda results: str(results["c"]["x"])}


def _setup(tmp_path: Path, monkeypatch) -> list[pages.Section]:
    folder = tmp_path / "sections"
    folder.mkdir()
    for name, text in SECTIONS.items():
        (folder / name).write_text(text)
    heads = {DOC: folder / "_benchmarks.md", ARCHIVE: folder / "_archive.md"}
    heads[DOC].write_text("# Benchmarks\n")
    heads[ARCHIVE].write_text("# Archive\n")
    monkeypatch.setattr(pages, "HEADS", heads)
    return pages.read_sections(folder)


def test_a_section_goes_to_the_archive_once_a_run_it_quotes_is_superseded(tmp_path, monkeypatch):
    sections = _setup(tmp_path, monkeypatch)
    assert [s.path.name for s in sections] == ["0010-one.md", "0020-two.md", "0030-three.md", "0040-four.md"]
    placed = pages.placement(sections, tables.Read({"c": {"x": 1}}), TABLES, ENTRIES)
    runs = {p.name: r for p, r in placed.runs.items()}
    assert runs["0010-one.md"] == {"a"}  # a's folder is not a_long's, though it starts alike
    assert runs["0020-two.md"] == {"a"}  # the command's input (--from) is not quoted
    assert runs["0030-three.md"] == {"b"}  # --out as the flat file the run had before, in an indented block
    assert runs["0040-four.md"] == {"c"}  # read by its table
    assert [s.heading for s in placed.pages[DOC]] == ["## One", "### Two"]
    assert [s.heading for s in placed.pages[ARCHIVE]] == ["### Three", "## Four"]


def test_the_archive_says_what_replaced_each_run_and_links_follow_their_section(tmp_path, monkeypatch):
    sections = _setup(tmp_path, monkeypatch)
    texts, placed, errors = pages.generate(tables.Read({"c": {"x": 1}}), TABLES, ENTRIES, sections)
    assert errors == ["benchmarks.md: a link to #nowhere, which neither page holds"]
    assert "[three](benchmarks-archive.md#three)" in texts[DOC]  # moved with its section
    archive = texts[ARCHIVE].split("\n")
    assert archive[:3] == ["# Archive", "", "## Three"]  # raised to the archive's level
    # the replacing run's home is the section whose command wrote it, not the first one naming it
    assert "- `b`, by `a` ([Two](benchmarks.md#two)): an earlier run of the same command." in archive
    assert "- `c`, by `a` ([Two](benchmarks.md#two)): read by a table only." in archive
    assert placed.anchors == {"one": DOC, "two": DOC, "three": ARCHIVE, "four": ARCHIVE}


def test_the_current_page_quotes_every_current_result_and_no_superseded_run(tmp_path):
    listing = tmp_path / "manifest.json"
    runs = [{**vars(e), "quoted_in": list(e.quoted_in)} for e in ENTRIES.values()]
    listing.write_text(json.dumps({"runs": runs}))
    found = {"a": ["README.md#headline"], "b": ["docs/benchmarks-archive.md#three"]}
    assert tables.status_errors(found, listing) == []
    found["c"] = ["docs/benchmarks.md#four"]
    del found["a"]
    assert tables.status_errors(found, listing) == [
        "a: a current run that neither benchmarks.md nor the README quotes",
        "c: superseded, yet quoted in docs/benchmarks.md#four"]


def test_every_section_of_the_docs_is_on_one_page():
    results = tables.load_results()
    entries = {e.label: e for e in manifest.read()}
    texts, placed, errors = pages.generate(results, tables.TABLES, entries)
    assert errors == []
    sections = pages.read_sections()
    assert sorted(s.path for secs in placed.pages.values() for s in secs) == sorted(s.path for s in sections)
    for s in placed.pages[DOC]:
        assert all(entries[label].status == "current" for label in placed.runs[s.path]), s.path.name
