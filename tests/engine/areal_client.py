"""AReaL 1.0.4's own SGLang client, loaded for the drop-in tests: ``areal.engine.sglang_remote``
(``SGLangBackend``, which builds every request and parses every answer) and
``areal.infra.remote_inf_engine`` (``RemoteInfEngine``, whose ``agenerate`` sends them and resumes a
sample that a pause or an update aborted).

scripts/setup.sh installs AReaL without its dependencies and adds the small packages its imports
need. Two that it imports at module level are never called on these paths: ray (AReaL's scheduler,
launcher and name service) and numba (sequence packing for training). Where they are not installed,
a module that answers every attribute stands in for each while AReaL is imported, and only then:
AReaL's modules keep what they took, and any later ``import ray`` or ``import numba`` in the test
session (another library probing for them) finds them missing, as they are.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import time
import types

STOOD_IN = ("ray", "numba")


class _Anything(type):
    """A class whose attributes, and whatever calling it makes, are more of the same: enough for
    ``@ray.remote``, ``ray.util.placement_group.PlacementGroup | None`` and ``@numba.njit(...)``."""

    def __getattr__(cls, name):
        return _anything

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # a bare decorator leaves the function as it is
        return _anything


_anything = _Anything("stand_in", (), {})


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STOOD_IN:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attr: _anything
        return module

    def exec_module(self, module):
        pass


def load():
    """``(sglang_remote, remote_inf_engine, io_struct, cli_args)`` of AReaL, or None if not installed."""
    if importlib.util.find_spec("areal") is None:
        return None
    finder = None
    if any(importlib.util.find_spec(name) is None for name in STOOD_IN):
        finder = _StandIns()
        sys.meta_path.insert(0, finder)
    try:
        from areal.api import cli_args, io_struct
        from areal.engine import sglang_remote
        from areal.infra import remote_inf_engine
        from areal.infra.utils import http  # noqa: F401  (the helper the tests send AReaL's requests with)
    finally:
        if finder is not None:
            sys.meta_path.remove(finder)
            for name in [n for n, m in sys.modules.items() if getattr(m, "__spec__", None) is not None
                         and m.__spec__.loader is finder]:
                del sys.modules[name]
    return sglang_remote, remote_inf_engine, io_struct, cli_args


class TrainerPause:
    """``WorkflowExecutor.is_paused`` as the trainer drives it: the one part of AReaL's executor that
    ``agenerate`` reads."""

    def __init__(self):
        self.paused = threading.Event()

    def is_paused(self) -> bool:
        return self.paused.is_set()


def engine(areal, url: str):
    """AReaL's RemoteInfEngine with its SGLang backend, on one server; it records the stop reason of
    every answer it parses (what AReaL's own resume loop decides on)."""
    sglang_remote, remote_inf_engine, _, cli_args = areal
    reasons: list[str] = []

    class Recorded(sglang_remote.SGLangBackend):
        def parse_generation_response(self, response):
            result = super().parse_generation_response(response)
            reasons.append(result.stop_reason)
            return result

    config = cli_args.InferenceEngineConfig(backend="sglang:d1", request_timeout=600, request_retries=1)
    built = remote_inf_engine.RemoteInfEngine(config, Recorded())
    built.addresses = [url.removeprefix("http://")]
    built.workflow_executor = TrainerPause()
    return built, reasons


def pause_and_continue(engine, reasons: list[str]) -> list[str]:
    """The trainer's pause around a weight sync: AReaL's executor paused, ``pause_generation`` (POST
    /pause_generation to every server), until an answer reaches AReaL's parser (at most 60 s), then
    ``continue_generation`` and the executor going on. Returns the stop reasons parsed while paused."""
    engine.workflow_executor.paused.set()
    engine.pause_generation()
    deadline = time.monotonic() + 60
    while not reasons and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = list(reasons)
    engine.continue_generation()
    engine.workflow_executor.paused.clear()
    return seen
