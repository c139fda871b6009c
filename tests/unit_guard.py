"""The unit tier is plain Python: it imports neither SGLang nor torch and starts no process, so it runs
in a minute on any machine and a failure in it is about seer's own logic, not about an engine.

A pytest plugin (``-p unit_guard`` in pyproject's addopts), not a tests/unit/conftest.py: a second
conftest module would also be named ``conftest`` and shadow the shared one (tests/conftest.py) for the
tests that import its helpers.

When a pytest session collects only tests/unit, that is enforced for the whole session:
``sglang`` and ``torch`` cannot be imported (``sys.modules`` holds ``None`` for them, so ``import``
raises and ``importlib.util.find_spec`` answers "not installed", as libraries that probe for torch
expect), and starting a process raises. A session that also collects tests/engine (``pytest tests``,
``scripts/test.sh``) loads SGLang for those tests, so the guard stays off there; the static import check
in test_tiers.py covers the unit modules in that case too.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
import sys
from pathlib import Path

import pytest

UNIT_DIR = Path(__file__).resolve().parent / "unit"
FORBIDDEN = ("sglang", "torch")
HINT = ("tests/unit imports neither sglang nor torch and starts no process (tests/unit_guard.py): "
        "a test that needs them belongs in tests/engine")

# The ways a Python process starts another: subprocess through its own reference to
# _posixsubprocess.fork_exec (or os.posix_spawn), multiprocessing's spawn and forkserver through
# _posixsubprocess.fork_exec, its fork through os.fork.
_SPAWNERS = [(subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec"), (os, "fork"), (os, "forkpty"), (os, "system"),
             (os, "posix_spawn"), (os, "posix_spawnp")] + [(os, n) for n in dir(os) if n.startswith(("execv", "spawnv"))]
_saved: dict[tuple[object, str], object] = {}
_active = pytest.StashKey[bool]()


class ProcessStartRefused(RuntimeError):
    pass


def _refuse(name: str):
    def refused(*args, **kwargs):
        raise ProcessStartRefused(f"{name}: {HINT}")
    return refused


def unit_only(config: pytest.Config) -> bool:
    """Whether every path this session collects lies under tests/unit."""
    base = Path(config.invocation_params.dir)
    paths = [(base / arg.split("::")[0]).resolve() for arg in config.args]
    return bool(paths) and all(p == UNIT_DIR or UNIT_DIR in p.parents for p in paths)


def pytest_configure(config: pytest.Config) -> None:
    if not unit_only(config):
        return
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in FORBIDDEN and sys.modules[m] is not None)
    if loaded:
        raise pytest.UsageError(f"{', '.join(loaded[:5])} imported before the unit tests ran (by a conftest or "
                                f"a plugin): {HINT}")
    for name in FORBIDDEN:
        sys.modules[name] = None
    for owner, name in _SPAWNERS:
        if hasattr(owner, name):
            _saved[(owner, name)] = getattr(owner, name)
            setattr(owner, name, _refuse(f"{getattr(owner, '__name__', owner)}.{name}"))
    config.stash[_active] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    for (owner, name), original in _saved.items():
        setattr(owner, name, original)
    _saved.clear()
    for name in FORBIDDEN:
        if sys.modules.get(name, 0) is None:
            del sys.modules[name]



def _explain(report) -> None:
    """Name the rule next to an import of SGLang or torch that the guard stopped."""
    text = str(report.longrepr or "")
    stopped = any(f"import of {name} halted" in text or f"'{name}' is not a package" in text for name in FORBIDDEN)
    if stopped or "ProcessStartRefused" in text:
        report.sections.append(("unit tier", HINT))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if item.config.stash.get(_active, False) and call.excinfo is not None:
        _explain(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    if collector.config.stash.get(_active, False):
        _explain(outcome.get_result())
