"""Formatting shared by the tables, and the runs' labels and folders."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Callable, Iterable

from benchmarks.harness import manifest
from benchmarks.harness.baselines import is_plain
from benchmarks.harness.result import RESULT

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "benchmarks.md"
ARCHIVE = ROOT / "docs" / "benchmarks-archive.md"
DOCS = (DOC, ARCHIVE)
STATUS = {DOC: "current", ARCHIVE: "superseded"}  # the runs each doc's tables read

MARKER = re.compile(r"^<!-- table:([A-Za-z0-9_.-]+) -->$")
END = "<!-- /table:{} -->"

Results = dict[str, dict]


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip("# ").strip().lower())
    return text.replace(" ", "-")


# ---------------------------------------------------------------- formatting

def fnum(x: float | None, digits: int = 1) -> str:
    """A number with thousands separators, or '-' for a missing one."""
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def fint(x: float | None) -> str:
    return "-" if x is None else f"{round(x):,}"


def fratio(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}x"


def fsec(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{fnum(x, digits)} s"


def spread(values: list[float | None], fmt: Callable[[float], str]) -> str:
    """One value when the repeats agree (or there is one), else 'mean (min-max)'."""
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    if len(set(fmt(v) for v in vals)) == 1:
        return fmt(vals[0])
    return f"{fmt(statistics.fmean(vals))} ({fmt(min(vals))}–{fmt(max(vals))})"


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


# label -> the run's folder, relative to the repository (``load_results`` fills it from the manifest)
RUN_PATHS: dict[str, str] = {}


def label_of(path: str) -> str:
    """A stored run's label from a path to it: its flat file's stem, or its folder's label
    (``<date>-<label>/`` or ``<date>-<label>/result.json``)."""
    p = Path(path)
    if p.name == RESULT:
        p = p.parent
    return manifest.folder_label(p) if p.suffix != ".json" else p.stem


def source(stems: Iterable[str]) -> str:
    """The runs' folders, as a reader finds them (``benchmarks/results/<benchmark>/<date>-<label>/``)."""
    return ", ".join(f"`{RUN_PATHS.get(s, f'benchmarks/results/{s}')}/`" for s in stems)


def mode_name(mode: str) -> str:
    """``baseline`` (stored runs, one plain SGLang) is "plain SGLang"; a run with several plain modes
    names each by how it is fed; a seer mode as is."""
    if mode == "baseline":
        return "plain SGLang"
    if is_plain(mode):
        return f"plain SGLang (`{mode}`)"
    return f"`{mode}`"


def pick(results: Results, pattern: str) -> list[str]:
    """Stems of the result files whose name matches ``pattern`` (a regex over the whole stem), sorted."""
    rx = re.compile(pattern)
    stems = sorted(s for s in results if rx.fullmatch(s))
    if not stems:
        raise KeyError(f"no results match {pattern!r}")
    return stems
