"""Compile SGLang's GPTQ marlin JIT kernels ahead of the server, without touching the GPU.

A fresh GPU host compiles them inside the first GPTQ server's start (minutes: ../shared/gpu/README.md, Traps),
which eats a device session. run_calibration.sh starts this in the background while other points run; the
server then finds them in TVM_FFI_CACHE_DIR. The GPU is hidden from this process (CUDA_VISIBLE_DEVICES=""),
so it holds no GPU memory and cannot disturb the points measured meanwhile; the architecture is given instead.

    CUDA_VISIBLE_DEVICES= python3 benchmarks/gpu/prewarm_jit.py --arch 9.0 --dtype float16

It needs no GPU at all: on a machine with nvcc 13.0 (CUDA_HOME set, for -lcudart) and the archive's SGLang and
apache-tvm-ffi, it builds the cache that a GPU host then loads without compiling (run_gptq_agents.sh).
"""
from __future__ import annotations

import argparse
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="9.0", help="compute capability of the GPU the server will use")
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    ap.add_argument("--moe-only", action="store_true", help="the MoE kernels and the repack only (MXFP4 marlin: "
                    "gpt-oss's attention is not quantized)")
    ap.add_argument("--dense-only", action="store_true", help="the dense GPTQ kernels and the repack only (a dense "
                    "GPTQ model such as the optimized preset's 14B: no MoE kernels)")
    ap.add_argument("--only", choices=["gptq_marlin_repack", "gptq_marlin", "moe_wna16_marlin"],
                    help="this module alone (each is one nvcc process: run one per module side by side)")
    a = ap.parse_args()
    from sglang.jit_kernel.gptq_marlin import _jit_gptq_marlin_module
    from sglang.jit_kernel.gptq_marlin_repack import _jit_gptq_marlin_repack_module
    from sglang.jit_kernel.moe_wna16_marlin import _jit_moe_wna16_marlin_module
    from sglang.jit_kernel.utils import override_jit_cuda_arch

    dtype = getattr(torch, a.dtype)
    major, minor = (int(x) for x in a.arch.split("."))
    with override_jit_cuda_arch(major, minor):
        for name, build in (("gptq_marlin_repack", _jit_gptq_marlin_repack_module),
                            ("gptq_marlin", None if a.moe_only else lambda: _jit_gptq_marlin_module(dtype)),
                            ("moe_wna16_marlin", None if a.dense_only else lambda: _jit_moe_wna16_marlin_module(dtype))):
            if build is None or (a.only and name != a.only):
                continue
            t0 = time.time()
            build()
            print(f"{name} ({a.dtype}, sm {a.arch}): {time.time() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
