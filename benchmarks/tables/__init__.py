"""Generate the results tables of docs/benchmarks.md and docs/benchmarks-archive.md from the stored runs.

    python -m benchmarks.tables            # rewrite every marked table, and the manifest's quoted_in
    python -m benchmarks.tables --check    # exit 1 if a table or quoted_in is out of date, or a doc
                                           # holds a run of the other status

A table lives between two marker lines in the document::

    <!-- table:NAME -->
    ...generated, do not edit...
    <!-- /table:NAME -->

``TABLES`` (``registry.py``) maps each NAME to the function that renders it from the loaded results (label -> the run's
``result.json``, every run of ``benchmarks/results/manifest.json``). Every figure comes from the runs;
the caption under each table says where from and whether it was measured on a CPU, emulated or
simulated. docs/benchmarks.md holds the current runs' tables and the archive the superseded runs'
(``STATUS``), except tables of a check across runs (``ACROSS_RUNS``). Standard library only; one module per kind of benchmark renders its tables.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Callable

from benchmarks.harness import manifest

from .format import DOC, DOCS, END, MARKER, RESULTS, ROOT, RUN_PATHS, STATUS, Results
from .registry import TABLES
from .rollout import rollout_table

__all__ = ["DOCS", "TABLES", "Read", "check", "main", "marked", "render", "rollout_table"]


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


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip("# ").strip().lower())
    return text.replace(" ", "-")


def quotes(doc: Path, results: Results, tables: dict[str, Callable[[Results], str]] | None = None
           ) -> dict[str, set[str]]:
    """label -> the sections of ``doc`` (``docs/<file>#<anchor>``) that quote the run: a table there reads
    it, or the prose names its folder or its label."""
    tables = TABLES if tables is None else tables
    labels = {label: path for label, path in RUN_PATHS.items()}
    out: dict[str, set[str]] = {}
    section = f"docs/{doc.name}"
    for line in doc.read_text().split("\n"):
        if line.startswith("#"):
            section = f"docs/{doc.name}#{slug(line)}"
            continue
        m = MARKER.match(line)
        found: set[str] = set()
        if m and m.group(1) in tables:
            results.read.clear()
            tables[m.group(1)](results)
            found |= results.read
        for label, path in labels.items():
            if path in line or f"`{label}`" in line:
                found.add(label)
        for label in found:
            out.setdefault(label, set()).add(section)
    return out


# Tables of a check across runs (the simulator against every stored emulated run): they read superseded
# runs too, since the check is about the simulator, not about which run a reader should quote.
ACROSS_RUNS = ("sim_errors",)


def status_errors(docs: dict[Path, str], results: Results) -> list[str]:
    """A table of docs/benchmarks.md that reads a superseded run, or one of the archive that reads only
    current runs: each doc holds the runs of its status (``STATUS``)."""
    status = {label: e.status for label, e in manifest.by_label().items()}
    errors = []
    for doc, wanted in docs.items():
        for name in marked(Path(doc).read_text()):
            if name in ACROSS_RUNS:
                continue
            results.read.clear()
            TABLES[name](results)
            got = {status[label] for label in results.read if label in status}
            if wanted == "current" and got - {"current"}:
                errors.append(f"{Path(doc).name}: table {name} reads a superseded run")
            if wanted == "superseded" and "superseded" not in got:
                errors.append(f"{Path(doc).name}: table {name} reads no superseded run")
    return errors


def quoted_in(results: Results) -> dict[str, list[str]]:
    """label -> every doc section that quotes the run, over both docs and the README."""
    out: dict[str, set[str]] = {}
    for doc in (*DOCS, ROOT / "README.md"):
        for label, sections in quotes(doc, results).items():
            out.setdefault(label, set()).update(sections)
    return {label: sorted(s) for label, s in out.items()}


def manifest_text(results: Results, path: Path = manifest.MANIFEST) -> str:
    """The manifest with each run's ``quoted_in`` as the docs have it now, and a run folder it did not
    list yet added as current (a later run's status is set by hand, with the run it replaces)."""
    data = json.loads(path.read_text())
    data["runs"] += [manifest.new_entry(folder) for folder in manifest.unlisted(path)]
    found = quoted_in(results)
    for run in data["runs"]:
        run["quoted_in"] = found.get(run["label"], [])
    return json.dumps(data, indent=1) + "\n"


def check(doc: Path = DOC, results_dir: Path = RESULTS) -> list[str]:
    """Names of the tables in ``doc`` that differ from what the results give (empty: up to date)."""
    _, changed = render(Path(doc).read_text(), load_results(results_dir))
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.tables", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a table or the manifest's quoted_in is out "
                    "of date, or a doc holds a run of the other status; change nothing")
    ap.add_argument("--doc", type=Path, default=None, help="one doc only (default: docs/benchmarks.md and the archive)")
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    results = load_results(args.results)
    docs = [args.doc] if args.doc else list(DOCS)
    texts = {doc: doc.read_text() for doc in docs}
    placed = {n for text in texts.values() for n in marked(text)}
    missing = [n for n in TABLES if n not in placed]
    if missing and not args.doc:
        print(f"note: tables not placed in the docs: {', '.join(missing)}", file=sys.stderr)
    stale = []
    for doc, text in texts.items():
        new, changed = render(text, results)
        stale += [f"{doc.name}: {name}" for name in changed]
        if not args.check and new != text:
            doc.write_text(new)
    listing = args.results / "manifest.json"
    errors = [] if args.doc else status_errors(STATUS, results)
    quoted = None if args.doc else manifest_text(results, listing)
    if args.check:
        if quoted is not None and quoted != listing.read_text():
            stale.append(f"{listing.name}: quoted_in")
        for line in stale + errors:
            print(line)
        if stale or errors:
            print("run: python -m benchmarks.tables")
            return 1
        print(f"{', '.join(d.name for d in docs)}: {sum(len(marked(t)) for t in texts.values())} tables up to date")
        return 0
    if quoted is not None and quoted != listing.read_text():
        listing.write_text(quoted)
    for line in errors:
        print(line, file=sys.stderr)
    print(f"{', '.join(d.name for d in docs)}: rewritten: {', '.join(stale) or 'none'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
