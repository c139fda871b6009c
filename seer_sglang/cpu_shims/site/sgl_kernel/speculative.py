"""CPU stand-in for ``sgl_kernel.speculative``: importable names, each raising when called."""

from . import _stub


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _stub(f"speculative.{name}")
