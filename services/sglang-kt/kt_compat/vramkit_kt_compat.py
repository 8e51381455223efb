"""Make SGLang 0.5.15.post1's KTransformers path meet kt-kernel 0.5.1 (issue 12).

SGLang (0.5.15.post1 up to at least 0.5.23, sglang/srt/layers/moe/kt_ep_wrapper.py) builds each layer's
CPU-expert wrapper as ``KTMoEWrapper(..., num_gpu_experts=N, ...)`` and keeps experts 0..N-1 on the GPU
(it masks topk ids >= N to -1 for the GPU kernel). kt-kernel from 0.5.1 on takes
``gpu_experts_mask`` (a bool tensor [num_experts], True = on the GPU) instead, and 0.5.0 and older lack
``CPUInfer.submit_with_cuda_stream`` that the forward needs. This module patches
``kt_kernel.KTMoEWrapper`` right after kt_kernel is imported so the old call builds the mask SGLang
means: the first N experts on the GPU, the rest on the CPU. Nothing else changes.

It is loaded lazily: ``install()`` (run by the sitecustomize beside it, or a .pth line in the image)
only registers an import hook, so Python processes that never import kt_kernel pay nothing.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

TARGET = "kt_kernel"


def first_n_mask(num_experts: int, num_gpu_experts: int | None):
    """The bool mask [num_experts] for SGLang's layout: experts 0..N-1 on the GPU (None = all on the CPU)."""
    import torch
    if num_gpu_experts is None:
        return None
    n = int(num_gpu_experts)
    if not 0 <= n <= num_experts:
        raise ValueError(f"num_gpu_experts={n} is outside 0..{num_experts}")
    mask = torch.zeros(num_experts, dtype=torch.bool)
    mask[:n] = True
    return mask


def patch(module) -> None:
    """Replace module.KTMoEWrapper by a subclass that also accepts num_gpu_experts (idempotent)."""
    orig = module.KTMoEWrapper
    if getattr(orig, "_vramkit_compat", False):
        return
    import inspect
    if "num_gpu_experts" in inspect.signature(orig.__new__).parameters:
        return  # an old kt-kernel that still speaks SGLang's argument: nothing to adapt

    class KTMoEWrapper(orig):  # the static methods (set_capture_batch_sizes, ...) are inherited
        _vramkit_compat = True

        def __new__(cls, *args, num_gpu_experts=None, gpu_experts_mask=None, **kwargs):
            if gpu_experts_mask is None and num_gpu_experts is not None:
                gpu_experts_mask = first_n_mask(int(kwargs["num_experts"]), num_gpu_experts)
            # orig.__new__ returns a backend object (not an instance of cls), so __init__ is not re-run
            return orig.__new__(orig, *args, gpu_experts_mask=gpu_experts_mask, **kwargs)

    KTMoEWrapper.__doc__ = orig.__doc__
    module.KTMoEWrapper = KTMoEWrapper


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Patch kt_kernel when (or if already) imported; safe to call more than once."""
    if TARGET in sys.modules:
        patch(sys.modules[TARGET])
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
