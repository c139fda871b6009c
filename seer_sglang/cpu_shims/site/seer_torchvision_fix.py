"""Defines the ``torchvision::nms``/``qnms`` op schemas before torchvision is first imported.

torchvision 0.28's C extension is CUDA-only; with the CPU torch its import dies on
``operator torchvision::nms does not exist``. A meta-path hook defines the schemas lazily, at the
first ``import torchvision``, so ordinary interpreter start-up does not pay for importing torch.
"""

import importlib.abc
import sys

_LIB = None


def _define_schemas() -> None:
    global _LIB
    import torch

    if _LIB is not None:
        return
    try:
        torch.ops.torchvision.nms.default  # already registered (real extension loaded)
        return
    except (AttributeError, RuntimeError):
        pass
    _LIB = torch.library.Library("torchvision", "DEF")
    _LIB.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIB.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


class _TorchvisionHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            _define_schemas()
        return None


def install() -> None:
    if "torchvision" in sys.modules:
        return
    if not any(isinstance(f, _TorchvisionHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionHook())


install()
