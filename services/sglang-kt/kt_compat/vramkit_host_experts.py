"""A CPU layer's decode batches computed by a C function that SGLang's CUDA graphs capture (issue 18): the part the
adapter's two opt-in CPU kernels share (vramkit_int4_experts.py: the GPTQ-Int4 values as they are;
vramkit_ggml_experts.py: llama.cpp's ggml on a GGUF).

How it runs: the layer's input, top-k ids and routing weights are copied into pinned buffers on SGLang's stream, a
CUDA host function (``cuLaunchHostFunc``, as kt-kernel's ``submit_with_cuda_stream``) runs the C function on them,
and the output is copied back on the same stream, so a graph replay calls the C code with no Python and no GIL. A
batch above ``max_tokens`` (a prompt chunk) goes to the layer's KT wrapper as before. With a share
(vramkit_gpu_share.py, the int4 kernel only) the C function is started by one host function and waited for by a second,
and between them the GPU computes its share of the batch's experts.
"""
from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, NamedTuple

_CUDA: list = []


def launch_host_func(stream: int, fn: int, arg: int) -> None:
    """cuLaunchHostFunc(stream, fn, arg) through the driver API (one libcuda a process, whichever runtime made the
    stream); under stream capture it becomes a host node of the graph."""
    if not _CUDA:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuLaunchHostFunc.restype = ctypes.c_int
        lib.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        _CUDA.append(lib)
    rc = _CUDA[0].cuLaunchHostFunc(stream, fn, arg)
    if rc != 0:
        raise RuntimeError(f"cuLaunchHostFunc failed: CUresult {rc}")


class Share(NamedTuple):
    """Part of each decode batch on the GPU over the bus (vramkit_gpu_share.py): the layer's BusExperts, the fraction
    of a call's distinct experts it takes, and the C function's two halves as host functions."""
    bus: Any
    fraction: float
    start_ptr: int
    wait_ptr: int


class HostExperts:
    """Stands in for one CPU layer's KT wrapper: submit_forward / sync_forward as SGLang's KTEPWrapperMethod calls
    them. `run_ptr`: the C host function; `job_new(n, x, ids, w, out)`: its argument for an n-token batch's pinned
    buffers (x [n, hidden] f32, ids [n, top-k] i32, w [n, top-k] f32, out [n, hidden] f32), made once per n."""

    def __init__(self, kt, run_ptr: int, job_new: Callable[[int, int, int, int, int], int], hidden: int, used: int,
                 max_tokens: int, share: Share | None = None):
        """`share`: where part of each decode batch runs on the GPU over the bus: the C function started and waited
        for by two host functions around the GPU's share."""
        self.kt = kt
        self.run_ptr = run_ptr
        self.job_new = job_new
        self.hidden = hidden
        self.used = used
        self.max_tokens = max_tokens
        self.share = share
        self.runner_config = None      # the layer's MoeRunnerConfig, set by the adapter's apply (the GPU's share)
        self._bufs: dict[int, tuple] = {}
        self._kt_pending = False
        self._gpu_out = None

    def load_weights(self, *args, **kwargs):
        return self.kt.load_weights(*args, **kwargs)

    def _buffers(self, n: int, device):
        b = self._bufs.get(n)
        if b is None:
            import torch
            x = torch.empty((n, self.hidden), dtype=torch.float32, pin_memory=True)
            ids = torch.empty((n, self.used), dtype=torch.int32, pin_memory=True)
            w = torch.empty((n, self.used), dtype=torch.float32, pin_memory=True)
            out = torch.zeros((n, self.hidden), dtype=torch.float32, pin_memory=True)
            out_gpu = torch.empty((n, self.hidden), dtype=torch.float32, device=device)
            job = self.job_new(n, x.data_ptr(), ids.data_ptr(), w.data_ptr(), out.data_ptr())
            if not job:
                raise RuntimeError(f"the CPU kernel took no {n}-token job (host RAM?)")
            b = self._bufs[n] = (x, ids, w, out, out_gpu, job)
        return b

    def submit_forward(self, hidden_states, topk_ids, topk_weights, cuda_stream):
        flat = hidden_states.view(-1, hidden_states.shape[-1])
        n = flat.shape[0]
        self._kt_pending = n > self.max_tokens
        if self._kt_pending:
            return self.kt.submit_forward(hidden_states, topk_ids, topk_weights, cuda_stream)
        import torch
        x, ids, w, _out, _out_gpu, job = self._buffers(n, flat.device)
        self._gpu_out = None
        share = self.share
        if share is not None:
            import vramkit_gpu_share
            gpu_ids, topk_ids = vramkit_gpu_share.split_ids(topk_ids.to(torch.int32), share.fraction, share.bus.experts)
        x.copy_(flat.to(torch.float32), non_blocking=True)
        ids.copy_(topk_ids.to(torch.int32), non_blocking=True)
        w.copy_(topk_weights.to(torch.float32), non_blocking=True)
        if share is None:
            launch_host_func(cuda_stream, self.run_ptr, job)
            return
        launch_host_func(cuda_stream, share.start_ptr, job)   # returns at once: the CPU computes its share
        try:
            self._gpu_out = share.bus.run(flat, gpu_ids, topk_weights, self.runner_config)
        except BaseException:
            launch_host_func(cuda_stream, share.wait_ptr, job)  # the started call waited for: none left running
            raise

    def sync_forward(self, hidden_states, cuda_stream):
        if self._kt_pending:
            return self.kt.sync_forward(hidden_states, cuda_stream)
        n = hidden_states.view(-1, hidden_states.shape[-1]).shape[0]
        _x, _ids, _w, out, out_gpu, job = self._bufs[n]
        if self._gpu_out is not None:
            launch_host_func(cuda_stream, self.share.wait_ptr, job)     # the CPU's share written
        out_gpu.copy_(out, non_blocking=True)
        if self._gpu_out is not None:
            return (out_gpu + self._gpu_out.view(out_gpu.shape).to(out_gpu.dtype)).to(hidden_states.dtype)
        return out_gpu.to(hidden_states.dtype)
