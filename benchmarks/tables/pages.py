"""The two benchmark pages, assembled from their sections by the status of the runs each one quotes.

``docs/sections/`` holds the pages' text, one file per section (``NNNN-<anchor>.md``, in page order:
a heading, its prose, and the markers of its tables, empty), and one head per page
(``_benchmarks.md``, ``_archive.md``). A section goes to docs/benchmarks.md while every run it quotes is
current in ``benchmarks/results/manifest.json``, and to docs/benchmarks-archive.md (its heading raised to
the archive's level) once one of them is superseded there: marking a run superseded in the manifest
moves what quoted it, and the current page never shows a replaced figure. A section quotes a run when
one of its tables reads it, its prose names the run's folder or its label in backquotes, or a command
shown there wrote it (``--out``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmarks.harness import manifest

from .format import ARCHIVE, DOC, MARKER, ROOT, Results, slug

SECTIONS = ROOT / "docs" / "sections"
HEADS = {DOC: SECTIONS / "_benchmarks.md", ARCHIVE: SECTIONS / "_archive.md"}
SECTION_FILE = re.compile(r"^\d{4}-[\w-]+\.md$")
ARCHIVE_LEVEL = 2  # the archive lists every superseded section at one level


@dataclass(frozen=True)
class Section:
    path: Path
    text: str  # the heading line first, then the body, no trailing blank line

    @property
    def heading(self) -> str:
        return self.text.split("\n", 1)[0]

    def at_level(self, level: int) -> str:
        """The text with its heading at ``level`` (``##`` = 2)."""
        title = self.heading.lstrip("#").strip()
        return "\n".join(["#" * level + " " + title, *self.text.split("\n")[1:]])


def read_sections(folder: Path = SECTIONS) -> list[Section]:
    """Every section file, in page order (by file name)."""
    out = []
    for path in sorted(folder.iterdir()):
        if not SECTION_FILE.match(path.name):
            continue
        text = path.read_text().rstrip("\n")
        if not re.match(r"^#{2,3} \S", text):
            raise ValueError(f"{path}: a section starts with its '## ' or '### ' heading")
        out.append(Section(path, text))
    return out


def _names(path: str, label: str) -> re.Pattern:
    """A run named in prose: its folder (not a longer folder that starts alike) or its label in backquotes."""
    return re.compile(re.escape(path) + r"(?![\w.-])|`" + re.escape(label) + "`")


OUT = re.compile(r"--out\s+(\S+)")


def is_fence(line: str) -> bool:
    """A line that opens or closes a code block (indented inside a list too)."""
    return line.lstrip().startswith("```")


def written_runs(lines: list[str], entries: list[manifest.Entry]) -> set[str]:
    """The labels of the runs a command shown in ``lines`` wrote: its ``--out`` in a code block, as the
    run's folder, its result file, or the flat file it was stored as before runs had folders."""
    outputs = {}
    for e in entries:
        outputs[e.path] = outputs[f"{e.path}/{manifest.RESULT}"] = e.label
        outputs.update({old: e.label for old in e.former.values()})
    found, code = set(), False
    for line in lines:
        if is_fence(line):
            code = not code
        elif code:
            found |= {outputs[p.rstrip("/")] for p in OUT.findall(line) if p.rstrip("/") in outputs}
    return found


def quoted_runs(lines: list[str], results: Results, tables: dict[str, Callable[[Results], str]],
                entries: list[manifest.Entry]) -> set[str]:
    """The labels of the runs ``lines`` quote: read by a table marked there, named in the prose, or
    written by a command shown there (``--out``). A command's inputs (``--from``, ``--replay``) are
    not quoted: a current run may be made from a replaced one's configuration or text."""
    names = {e.label: _names(e.path, e.label) for e in entries}
    found = written_runs(lines, entries)
    code = False
    for line in lines:
        if is_fence(line):
            code = not code
        if code or is_fence(line):
            continue
        m = MARKER.match(line)
        if m and m.group(1) in tables:
            results.read.clear()
            tables[m.group(1)](results)
            found |= results.read
        found |= {label for label, pattern in names.items() if pattern.search(line)}
    return found


@dataclass
class Placed:
    """Both pages' sections, and the runs each section quotes."""

    pages: dict[Path, list[Section]]
    runs: dict[Path, set[str]]  # section file -> labels

    @property
    def anchors(self) -> dict[str, Path]:
        """anchor -> the page whose section it is."""
        return {slug(s.heading): page for page, secs in self.pages.items() for s in secs}


def placement(sections: list[Section], results: Results, tables: dict[str, Callable[[Results], str]],
              entries: dict[str, manifest.Entry]) -> Placed:
    """Each page's sections: the archive holds those that quote a superseded run (``entries``: the
    manifest by label), the current page the rest, both in file order."""
    placed = Placed({DOC: [], ARCHIVE: []}, {})
    for section in sections:
        runs = quoted_runs(section.text.split("\n"), results, tables, list(entries.values()))
        placed.runs[section.path] = runs
        superseded = any(label in entries and entries[label].status == "superseded" for label in runs)
        placed.pages[ARCHIVE if superseded else DOC].append(section)
    return placed


def homes(placed: Placed, entries: dict[str, manifest.Entry]) -> dict[str, Section]:
    """label -> the current section that shows the run: the first whose command wrote it, else the first
    that quotes it."""
    home: dict[str, Section] = {}
    for s in reversed(placed.pages[DOC]):
        home.update({label: s for label in placed.runs[s.path]})
    for s in reversed(placed.pages[DOC]):
        home.update({label: s for label in written_runs(s.text.split("\n"), list(entries.values()))})
    return home


def replaced(section: Section, placed: Placed, entries: dict[str, manifest.Entry], home: dict[str, Section]) -> str:
    """What the manifest says replaced the superseded runs ``section`` quotes: each replacing run with
    the current section that shows it (``home``), and why."""
    groups: dict[tuple[str, str], list[str]] = {}
    for label in sorted(placed.runs[section.path]):
        e = entries.get(label)
        if e is not None and e.status == "superseded":
            groups.setdefault((e.superseded_by, e.why), []).append(label)
    lines = ["Superseded (`benchmarks/results/manifest.json`):"]
    for (by, why), labels in groups.items():
        where = home.get(by)
        link = f" ([{where.heading.lstrip('#').strip()}](benchmarks.md#{slug(where.heading)}))" if where else ""
        lines.append(f"- {', '.join(f'`{x}`' for x in labels)}, by `{by}`{link}: {why}.")
    return "\n".join(lines)


def assemble(page: Path, placed: Placed, entries: dict[str, manifest.Entry]) -> str:
    """A page's text before its tables are rendered: its head, then its sections; in the archive each
    section at the archive's level, with what replaced its runs under its heading."""
    parts = [HEADS[page].read_text().rstrip("\n")]
    home = homes(placed, entries) if page == ARCHIVE else {}
    for s in placed.pages[page]:
        if page == ARCHIVE:
            heading, _, body = s.at_level(ARCHIVE_LEVEL).partition("\n")
            parts.append("\n\n".join([heading, replaced(s, placed, entries, home), body.lstrip("\n")]))
        else:
            parts.append(s.text)
    return "\n\n".join(parts) + "\n"


# a link to a section of either page: ](#anchor), ](benchmarks.md#anchor), ](benchmarks-archive.md#anchor)
LINK = re.compile(r"\]\((?:benchmarks(?:-archive)?\.md)?#([\w-]+)\)")


def relink(text: str, here: Path, where: dict[str, Path]) -> tuple[str, list[str]]:
    """``text`` (on page ``here``) with every link to a section pointing at the page that holds the
    section now (``where``: anchor -> page), and the anchors no page holds."""
    broken: list[str] = []

    def fix(m: re.Match) -> str:
        target = where.get(m.group(1))
        if target is None:
            broken.append(m.group(1))
            return m.group(0)
        return f"]({'' if target == here else target.name}#{m.group(1)})"

    return LINK.sub(fix, text), broken


def generate(results: Results, tables: dict[str, Callable[[Results], str]], entries: dict[str, manifest.Entry],
             sections: list[Section] | None = None) -> tuple[dict[Path, str], Placed, list[str]]:
    """Both pages' text (tables not yet rendered), where each section went, and the links that lead
    nowhere (``entries``: the manifest by label)."""
    placed = placement(read_sections() if sections is None else sections, results, tables, entries)
    where = placed.anchors
    out, errors = {}, []
    for page in placed.pages:
        text, broken = relink(assemble(page, placed, entries), page, where)
        out[page] = text
        errors += [f"{page.name}: a link to #{a}, which neither page holds" for a in broken]
    return out, placed, errors


def readme_links(readme: Path, where: dict[str, Path]) -> list[str]:
    """Links from the README to a section of the benchmark pages that is not (or no longer) there."""
    errors = []
    for page, anchor in re.findall(r"docs/(benchmarks(?:-archive)?\.md)#([\w-]+)", readme.read_text()):
        if where.get(anchor, Path()).name != page:
            errors.append(f"{readme.name}: docs/{page}#{anchor} is not a section of that page")
    return errors
