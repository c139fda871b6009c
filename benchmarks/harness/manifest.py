"""Which stored runs there are, which of them the docs quote, and which a later run replaced.

``benchmarks/results/manifest.json`` lists every run folder: its benchmark and label, ``kind`` (a
``result``, or a ``recording`` that later runs read as input), ``status`` (``current``, or ``superseded``
with ``superseded_by`` and ``why``), ``regime`` (emulated, CPU-measured, GPU-measured or simulated), the
doc sections that quote it, ``former``: the flat file the run was stored as before runs had folders, and
for the runs the docs lead with a ``headline`` (what ran and its result in a line).
A result file records the paths of its inputs as they were when it ran (``--replay``, ``--sim-acceptance``,
``--from``); ``resolve`` finds such a path in its run folder now, so no stored result is rewritten.
The tables and the docs read runs through here, by label.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from benchmarks.harness.result import RESULT, RESULTS, ROOT

MANIFEST = RESULTS / "manifest.json"
STATUSES = ("current", "superseded")


@dataclass(frozen=True)
class Entry:
    """One run of the manifest: its folder (relative to the repository) and what the docs make of it."""

    path: str
    benchmark: str
    label: str
    kind: str
    status: str
    regime: str
    former: dict
    quoted_in: tuple[str, ...] = ()
    superseded_by: str | None = None
    why: str | None = None
    # a run the docs' "Results at a glance" leads with: its ``order`` there, ``what`` ran, the ``result``
    # in a line, and ``with``: the labels of other runs the line draws on
    headline: dict | None = None

    @property
    def folder(self) -> Path:
        return ROOT / self.path

    @property
    def result(self) -> Path:
        return self.folder / RESULT

    def load(self) -> dict:
        return json.loads(self.result.read_text())


def read(path: Path = MANIFEST) -> list[Entry]:
    data = json.loads(Path(path).read_text())
    return [Entry(**{**run, "quoted_in": tuple(run.get("quoted_in", ()))}) for run in data["runs"]]


@lru_cache(maxsize=4)
def _index(path: Path) -> dict[str, Path]:
    """Every file a run folder holds, by the repository path it had before the run had a folder."""
    out = {}
    for entry in read(path):
        for new, old in entry.former.items():
            out[old] = entry.folder / new
    return out


def resolve(name: str | Path, manifest: Path = MANIFEST) -> Path:
    """A stored input as a result names it: the path itself where it exists, else the file of a run folder
    that was stored under that path (``former``)."""
    path = Path(name)
    if path.exists():
        return path
    rel = (path if not path.is_absolute() else path.relative_to(ROOT)).as_posix()
    found = _index(Path(manifest)).get(rel)
    if found is None:
        raise FileNotFoundError(f"{name}: neither a file nor a former path in {manifest}")
    return found


class Moved(str):
    """A stored input where it is now, equal to the path a stored result recorded for it: code that opens
    it reads the file in its run folder, and code that matches it against a result's recorded path
    (a replay's text against the text an acceptance file was measured on) still finds the match."""

    former: str

    def __new__(cls, now: str | Path, former: str):
        self = super().__new__(cls, str(now))
        self.former = former
        return self

    def __eq__(self, other) -> bool:
        if str(self) == other or other == self.former:
            return True
        try:  # another name of the same stored file: a folder path where a run recorded its flat path
            return isinstance(other, str) and Path(resolve(other)).resolve() == Path(str(self)).resolve()
        except FileNotFoundError:
            return False

    __hash__ = str.__hash__


def moved(name: str | None) -> str | None:
    """``resolve`` for an input path a stored result recorded, as a ``Moved`` that still equals it."""
    return None if name is None else Moved(resolve(name), str(name))


def by_label(status: str | None = None, kind: str = "result", path: Path = MANIFEST) -> dict[str, Entry]:
    """The manifest's runs of ``kind`` by label, only those of ``status`` when given."""
    return {e.label: e for e in read(path) if e.kind == kind and (status is None or e.status == status)}


def latest_recheck(label: str, path: Path = MANIFEST) -> dict | None:
    """The newest stored ``benchmarks.sim_recheck`` of the run ``label`` (its ``stored`` and ``now``
    checks, and ``targets_now`` where it has bounds), or None where none covers it."""
    runs = by_label(path=path)
    target = runs[label].folder.resolve()
    for entry in sorted((e for e in runs.values() if e.benchmark == "sim_recheck"), key=lambda e: e.path,
                        reverse=True):
        for name, checked in entry.load()["runs"].items():
            if Path(resolve(name)).resolve() == target:
                return checked
    return None


SIMULATED = ("sim", "sim_bounds", "sim_recheck")  # benchmarks whose runs run no engine
RECORDINGS = ("record_text",)  # benchmarks whose runs are inputs of later runs


def folder_label(folder: Path) -> str:
    """A run folder's label: its name without the date (``<yyyy>-<mm>-<dd>-<label>``)."""
    return folder.name.split("-", 3)[-1]


def new_entry(folder: Path) -> dict:
    """A manifest entry for a run folder the manifest does not list yet: current until a later run
    replaces it, its regime from the run's own ``meta``."""
    meta = json.loads((folder / RESULT).read_text()).get("meta", {})
    benchmark = folder.parent.name
    if benchmark in SIMULATED:
        regime = "simulated"
    elif meta.get("emulated"):
        regime = "emulated"
    elif (meta.get("machine") or {}).get("gpu"):
        regime = "GPU-measured"
    else:
        regime = "CPU-measured"
    return {"path": folder.relative_to(ROOT).as_posix(), "benchmark": benchmark, "label": folder_label(folder),
            "kind": "recording" if benchmark in RECORDINGS else "result", "regime": regime, "status": "current",
            "former": {}}


def unlisted(path: Path = MANIFEST) -> list[Path]:
    """Run folders under the results that the manifest does not list."""
    listed = {e.folder for e in read(path)}
    return sorted(p.parent for p in RESULTS.glob(f"*/*/{RESULT}") if p.parent not in listed)


def with_unlisted(path: Path = MANIFEST) -> dict:
    """The manifest's data with every run folder it does not list yet added as current (``new_entry``)."""
    data = json.loads(Path(path).read_text())
    data["runs"] += [new_entry(folder) for folder in unlisted(path)]
    return data


def load_run(name: str | Path) -> dict:
    """A stored run's result from its folder, its ``result.json``, or the flat path it had before."""
    path = resolve(name)
    return json.loads((path / RESULT if path.is_dir() else path).read_text())
