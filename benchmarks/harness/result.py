"""The one writer of benchmark results: a run folder per run, written once, that says what ran and where.

    benchmarks/results/<benchmark>/<date>-<label>/result.json   (plots and side files beside it)

A result is the record of one run: what a later reader needs is the command that made it, the commit it
ran (and whether the tree had changes on top), the machine (without its host name) and whether the
timings were emulated. ``result.json`` holds that as ``meta`` next to the benchmark's own figures and
ratios. A run folder is never written twice: ``start`` refuses an existing one, so a rerun is a new run
beside the old and a result is never rewritten after its run. What is computed from results later
(tables, plots, simulator rechecks) is written elsewhere (``benchmarks.tables``, ``benchmarks.sim_recheck``).

Every script's ``--out`` names its run: ``--out benchmarks/results/cpu_tiny.json`` (or ``.../cpu_tiny``)
makes ``benchmarks/results/<benchmark>/<date>-cpu_tiny/``.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
RESULT = "result.json"
PARTIAL = "result.partial.json"


def today() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")


DATED = re.compile(r"\d{4}-\d{2}-\d{2}-.")  # a run folder's name: <yyyy>-<mm>-<dd>-<label>


def run_folder(benchmark: str, out: str | Path | None, date: str | None = None) -> Path:
    """Where ``--out`` puts a run of ``benchmark``: ``<out's folder>/<benchmark>/<date>-<out's stem>``;
    without ``--out``, ``benchmarks/results/<benchmark>/<date>-run``. An ``--out`` that already names a
    run folder (``.../<benchmark>/<date>-<label>``, the form the docs' commands show) is taken as it is."""
    out = Path(out) if out else RESULTS / "run"
    label = out.name[: -len(out.suffix)] if out.suffix == ".json" else out.name
    if out.parent.name == benchmark:
        return out.parent / (label if DATED.match(label) else f"{date or today()}-{label}")
    return out.parent / benchmark / f"{date or today()}-{label}"


def git_state(cwd: Path = ROOT) -> dict:
    """The commit the run ran and whether the tree had uncommitted changes to tracked files."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def version(package: str) -> str | None:
    """An installed package's version, read from its metadata: the package itself is not imported."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def gpu_name() -> str | None:
    """The first GPU's name: from torch if the run already imported it, else from nvidia-smi if present."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return torch.cuda.get_device_name()
        except Exception:  # a torch without CUDA support: fall through
            pass
    if shutil.which("nvidia-smi"):
        try:
            done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                  text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        names = done.stdout.strip().splitlines()
        return names[0].strip() if done.returncode == 0 and names else None
    return None


def machine() -> dict:
    """The machine without its name: what decides how fast a run can be."""
    return {"system": platform.system(), "arch": platform.machine(), "cpus": os.cpu_count(), "gpu": gpu_name(),
            "python": platform.python_version(), "torch": version("torch"), "sglang": version("sglang")}


def command(benchmark: str, argv: list[str] | None = None) -> str:
    """The command line as it is typed to run the benchmark again."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["python -m", f"benchmarks.{benchmark}", *args])


def meta(benchmark: str, emulated: str | None = None, argv: list[str] | None = None) -> dict:
    return {"benchmark": benchmark, "command": command(benchmark, argv),
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "git": git_state(),
            "machine": machine(),
            "emulated": emulated or False}


@dataclass
class Run:
    """A run folder this process made: its ``result.json`` and the files beside it."""

    folder: Path
    meta: dict = field(default_factory=dict)

    def file(self, name: str) -> Path:
        """A file beside the result: a plot, a trace, a fitted step model."""
        return self.folder / name

    @property
    def result(self) -> Path:
        return self.folder / RESULT

    def write(self, figures: dict, partial: bool = False, indent: int | None = 1) -> Path:
        """The result: ``meta`` and the benchmark's figures. ``partial`` keeps what a long run has so far
        (``result.partial.json``, gone once the result is written); the result itself is written once.
        ``indent=None`` writes it compact (a recording's token lists)."""
        if self.result.exists():
            raise FileExistsError(f"{self.result} is written already: a result is written once")
        path = self.folder / (PARTIAL if partial else RESULT)
        path.write_text(json.dumps({"meta": self.meta, **figures}, indent=indent) + "\n")
        if not partial:
            (self.folder / PARTIAL).unlink(missing_ok=True)
        return path


def start(benchmark: str, out: str | Path | None = None, *, emulated: str | None = None,
          argv: list[str] | None = None, date: str | None = None) -> Run:
    """Make the run's folder, refusing one that exists (a rerun is a new run, under another label or
    date), and take the run's ``meta`` now, before it runs: the commit and tree it starts from."""
    folder = run_folder(benchmark, out, date)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir()
    except FileExistsError:
        raise FileExistsError(f"{folder} exists: a run folder is written once (give another --out)") from None
    return Run(folder, meta(benchmark, emulated, argv))


def load(folder: str | Path) -> dict:
    """A run's ``result.json``, from its folder (or the file itself)."""
    path = Path(folder)
    return json.loads((path / RESULT if path.is_dir() else path).read_text())
