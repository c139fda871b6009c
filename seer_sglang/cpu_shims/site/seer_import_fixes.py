"""Fixes to SGLang modules on a machine without an accelerator, applied as they are first imported.

- **Page-locked host memory degrades to ordinary memory.** SGLang pins host buffers for faster copies
  to the GPU: LoRA's layers and its torch backend ask for ``pin_memory=True`` (and call
  ``Tensor.pin_memory()``), and the routed-experts capturer registers its host buffer with
  ``cudaHostRegister``. With the CPU torch each of these raises, so an instance started with
  ``--enable-lora`` or ``--enable-return-routed-experts`` dies at start-up. Pinning changes how fast a
  copy to a device runs, never a value, so on CPU the request is dropped.
- **Placeholder ``sgl_kernel`` ops for names bound at import.** ``models/qwen3_5.py`` binds four
  ``torch.ops.sgl_kernel.*_cpu`` ops when its module runs on CPU, and the Qwen-VL image processor
  imports it (to list the architectures it serves), so without them no Qwen2-VL model can start. The
  placeholders raise when called; no SGLang code probes for these names, so no path changes. The
  AMX probe (``convert_weight_packed``) stays absent.

Each fix runs when its module is first imported (a meta-path hook, as for torchvision), so ordinary
interpreter start-up does not import torch, and a machine with CUDA is left alone.
"""

import importlib.abc
import importlib.util
import sys

# module -> what to do: "torch" / "host_register" once it has run, "placeholder_ops" before it runs
_TARGETS = {
    "sglang.srt.lora.layers": "torch",
    "sglang.srt.lora.backend.torch_backend": "torch",
    "sglang.srt.lora.mem_pool": "torch",
    "sglang.srt.mem_cache.pool_host.common": "host_register",
    "sglang.srt.models.qwen3_5": "placeholder_ops",
}
_PLACEHOLDER_OPS = ("fused_sigmoid_mul_cpu", "fused_qk_gemma_rmsnorm_cpu", "fused_qk_gemma_rmsnorm_with_gate_cpu",
                    "fused_qkvzba_split_reshape_cat_contiguous_cpu")
_LIB = None


class _UnpinnedTorch:
    """``torch`` as one module sees it, with ``pin_memory=`` dropped from tensor factories."""

    _FACTORIES = ("tensor", "empty", "zeros", "ones", "full", "arange", "as_tensor")

    def __init__(self, torch):
        self._torch = torch

    def __getattr__(self, name):
        value = getattr(self._torch, name)
        if name in self._FACTORIES:
            def unpinned(*args, _factory=value, **kwargs):
                kwargs.pop("pin_memory", None)
                return _factory(*args, **kwargs)
            return unpinned
        return value


def _no_accelerator() -> bool:
    import torch

    return not torch.cuda.is_available() and not (hasattr(torch, "xpu") and torch.xpu.is_available())


def _define_placeholder_ops() -> None:
    global _LIB
    import torch

    if _LIB is not None:
        return
    _LIB = torch.library.Library("sgl_kernel", "FRAGMENT")
    for name in _PLACEHOLDER_OPS:
        if hasattr(torch.ops.sgl_kernel, name):  # a real sgl_kernel build has it
            continue
        _LIB.define(f"{name}(Tensor[] args) -> ()")

        def unavailable(args, _name=name):
            raise RuntimeError(f"sgl_kernel.{_name} is an AMX kernel and is not available on this CPU engine")

        _LIB.impl(name, unavailable, "CompositeExplicitAutograd")


def _patch(module) -> None:
    if not _no_accelerator():
        return
    import torch

    if _TARGETS[module.__name__] == "torch":
        module.torch = _UnpinnedTorch(torch)
        if not getattr(torch.Tensor.pin_memory, "_seer_unpinned", False):
            def pin_memory(self, *args, **kwargs):
                return self
            pin_memory._seer_unpinned = True
            torch.Tensor.pin_memory = pin_memory
    else:
        module._cuda_host_register = lambda *args, **kwargs: None


class _Loader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        if _TARGETS[module.__name__] == "placeholder_ops":
            if _no_accelerator():
                _define_placeholder_ops()
            self._loader.exec_module(module)
            return
        self._loader.exec_module(module)
        _patch(module)


class _ImportFixHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _TARGETS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    if not any(isinstance(f, _ImportFixHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _ImportFixHook())


install()
