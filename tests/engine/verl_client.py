"""veRL 0.9.1's HTTP client of SGLang, loaded for the drop-in tests: ``HttpServerAdapter`` and
``AsyncHttpServerAdapter`` (verl/workers/rollout/sglang_rollout/http_server_engine.py).

The adapter module is loaded alone: ``verl/__init__`` imports ray and tensordict, which this client
does not use (scripts/setup.sh installs verl without its dependencies)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from urllib.parse import urlparse


def load():
    """The adapter module, or None if veRL is not installed."""
    spec = importlib.util.find_spec("verl")
    if spec is None:
        return None
    path = Path(spec.submodule_search_locations[0]) / "workers" / "rollout" / "sglang_rollout" / "http_server_engine.py"
    module_spec = importlib.util.spec_from_file_location("verl_http_server_engine", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _concrete(cls):
    """veRL 0.9.1 was written against SGLang 0.5.12; 0.5.23's ``EngineBase`` has abstract methods the
    adapter lacks (in-process weight-update hooks, which an HTTP client never calls)."""
    def unused(self, *args, **kwargs):
        raise NotImplementedError("not part of veRL's HTTP client")

    missing = {name: unused for name in getattr(cls, "__abstractmethods__", ())}
    return type(cls.__name__, (cls,), missing) if missing else cls


def adapter(verl_http, url: str, model: str, asynchronous: bool = False):
    """veRL's adapter around a running server (``launch_server=False``, as veRL's rollout workers build
    it for a server they did not start)."""
    address = urlparse(url)
    cls = _concrete(verl_http.AsyncHttpServerAdapter if asynchronous else verl_http.HttpServerAdapter)
    return cls(launch_server=False, host=address.hostname, port=address.port, model_path=model,
               device="cpu", timeout=300)
