"""Generate docs/benchmarks.md and docs/benchmarks-archive.md from their sections and the stored runs.

    python -m benchmarks.tables            # rewrite both pages, their tables, and the manifest's quoted_in
    python -m benchmarks.tables --check    # exit 1 if any of them is out of date or a link leads nowhere

The pages' text lives in ``docs/sections/`` (``pages.py``): each section goes to the current page or the
archive by the status the manifest gives the runs it quotes. Edit the sections, never the pages. A table
lives between two marker lines in a section::

    <!-- table:NAME -->
    ...generated, do not edit...
    <!-- /table:NAME -->

``TABLES`` (``registry.py``) maps each NAME to the function that renders it from the loaded results (label -> the run's
``result.json``, every run of ``benchmarks/results/manifest.json``). Every figure comes from the runs;
the caption under each table says where from and whether it was measured on a CPU, emulated or
simulated. Standard library only; one module per kind of benchmark renders its tables.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from benchmarks.harness import manifest

from . import pages
from .format import DOCS, END, MARKER, RESULTS, ROOT, RUN_PATHS, Results, slug
from .registry import TABLES
from .rollout import rollout_table

__all__ = ["DOCS", "TABLES", "Read", "main", "marked", "render", "rollout_table"]

README = ROOT / "README.md"


# ---------------------------------------------------------------- the document

class Read(dict):
    """The results by label, noting which labels a table reads (``quoted``): the manifest says which doc
    sections quote each run, and the docs hold only the runs of their status."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self.read.add(key)
        return value

    def get(self, key, default=None):
        if key in self:
            return self[key]
        return default


def load_results(results_dir: Path = RESULTS) -> Results:
    """Every stored result of the manifest (recordings are inputs, not results), by label."""
    out = Read()
    listing = Path(results_dir) / "manifest.json"
    RUN_PATHS.update({e.label: e.path for e in manifest.read(listing)})
    for label, entry in sorted(manifest.by_label(path=listing).items()):
        out[label] = entry.load()
    out.read.clear()
    return out


def render(text: str, results: Results, tables: dict[str, Callable[[Results], str]] | None = None
           ) -> tuple[str, list[str]]:
    """``text`` with every marked table regenerated, and the names of the tables whose content changed."""
    tables = TABLES if tables is None else tables
    lines = text.split("\n")
    out: list[str] = []
    changed: list[str] = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        out.append(lines[i])
        i += 1
        if not m:
            continue
        name = m.group(1)
        if name not in tables:
            raise KeyError(f"unknown table {name!r} (known: {', '.join(tables)})")
        try:
            j = lines.index(END.format(name), i)
        except ValueError:
            raise ValueError(f"table {name!r} has no end marker {END.format(name)!r}") from None
        new = ["", *tables[name](results).split("\n"), ""]  # blank lines keep the markers out of the table
        if lines[i:j] != new:
            changed.append(name)
        out += new
        i = j  # the end marker is copied on the next turn
    return "\n".join(out), changed


def marked(text: str) -> list[str]:
    return [m.group(1) for m in map(MARKER.match, text.split("\n")) if m]


def quotes(doc: str, text: str, results: Results, entries: list[manifest.Entry]) -> dict[str, set[str]]:
    """label -> the sections of ``text`` (``<doc>#<anchor>``) that quote the run (``pages.quoted_runs``)."""
    out: dict[str, set[str]] = {}
    chunks: list[tuple[str, list[str]]] = [(doc, [])]
    code = False
    for line in text.split("\n"):
        code ^= pages.is_fence(line)
        if not code and line.startswith("#"):
            chunks.append((f"{doc}#{slug(line)}", []))
        chunks[-1][1].append(line)
    for section, lines in chunks:
        for label in pages.quoted_runs(lines, results, TABLES, entries):
            out.setdefault(label, set()).add(section)
    return out


def quoted_in(texts: dict[Path, str], results: Results, entries: list[manifest.Entry]) -> dict[str, list[str]]:
    """label -> every doc section that quotes the run, over both pages and the README."""
    out: dict[str, set[str]] = {}
    for doc, text in {**texts, README: README.read_text()}.items():
        for label, sections in quotes(doc.relative_to(ROOT).as_posix(), text, results, entries).items():
            out.setdefault(label, set()).update(sections)
    return {label: sorted(s) for label, s in out.items()}


def manifest_text(found: dict[str, list[str]], path: Path = manifest.MANIFEST) -> str:
    """The manifest with each run's ``quoted_in`` as the docs have it now (``found``), and a run folder
    it did not list yet added as current (a later run's status is set by hand, with the run it replaces)."""
    data = manifest.with_unlisted(path)
    for run in data["runs"]:
        run["quoted_in"] = found.get(run["label"], [])
    return json.dumps(data, indent=1) + "\n"


CURRENT_PAGES = ("docs/benchmarks.md", "README.md")


def status_errors(found: dict[str, list[str]], path: Path = manifest.MANIFEST) -> list[str]:
    """A current result that neither benchmarks.md nor the README quotes, or a superseded run that one
    of them still quotes (the README is written by hand)."""
    errors = []
    for e in manifest.read(path):
        here = [q for q in found.get(e.label, []) if q.startswith(CURRENT_PAGES)]
        if e.status == "current" and e.kind == "result" and not here:
            errors.append(f"{e.label}: a current run that neither benchmarks.md nor the README quotes")
        if e.status == "superseded" and here:
            errors.append(f"{e.label}: superseded, yet quoted in {', '.join(here)}")
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tables", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a page, a table or the manifest's quoted_in "
                    "is out of date, or a link leads to no section; change nothing")
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    listing = args.results / "manifest.json"
    if manifest.unlisted(listing) and not args.check:  # a new run is listed as current first, so its tables can read it
        listing.write_text(json.dumps(manifest.with_unlisted(listing), indent=1) + "\n")
    results = load_results(args.results)
    entries = manifest.read(listing)
    texts, placed, errors = pages.generate(results, TABLES, {e.label: e for e in entries})
    errors += pages.readme_links(README, placed.anchors)
    names = {n for text in texts.values() for n in marked(text)}
    missing = [n for n in TABLES if n not in names]
    if missing:
        print(f"note: tables not placed in the docs: {', '.join(missing)}", file=sys.stderr)
    stale = []
    for doc, text in texts.items():
        new, _ = render(text, results)
        if new != (doc.read_text() if doc.exists() else None):
            stale.append(doc.name)
            if not args.check:
                doc.write_text(new)
    found = quoted_in(texts, results, entries)
    errors += status_errors(found, listing)
    quoted = manifest_text(found, listing)
    if quoted != listing.read_text():
        stale.append(f"{listing.name}: quoted_in")
        if not args.check:
            listing.write_text(quoted)
    for line in errors:
        print(line, file=sys.stderr)
    if args.check:
        for line in stale:
            print(f"out of date: {line}")
        if stale or errors:
            print("run: python -m benchmarks.tables")
            return 1
        print(f"{', '.join(d.name for d in texts)}: {len(names)} tables up to date")
        return 0
    print(f"rewritten: {', '.join(stale) or 'none'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
