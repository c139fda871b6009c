"""CPU stand-in for SGLang's CUDA-only ``sgl_kernel`` package.

SGLang imports names from ``sgl_kernel`` at module level even on its CPU engine. This stand-in lets
those imports succeed; calling anything raises, so no CUDA path can run silently. It registers no
``torch.ops.sgl_kernel`` ops on purpose: SGLang probes for them (``cpu_has_amx_support``) and would
otherwise route to AMX kernels that do not exist here. Only ``sgl_kernel.speculative`` resolves as a
submodule; every other submodule stays an ImportError, because SGLang falls back on ImportError.
"""

__version__ = "0.0.0+seer.cpu"
SEER_CPU_STUB = True


def _stub(name: str):
    def _unavailable(*args, **kwargs):
        raise RuntimeError(f"sgl_kernel.{name} is a CUDA kernel and is not available on the CPU engine")

    _unavailable.__name__ = name
    return _unavailable


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if name == "speculative":
        from . import speculative

        return speculative
    return _stub(name)
