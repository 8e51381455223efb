#!/usr/bin/env bash
# First call of a GPU session that needs MLA (benchmarks/gpu/host_env.sh says why): unpack the CuTe DSL
# (nvidia-cutlass-dsl-libs-base 4.5.2, SGLang 0.5.15.post1's pin, re-packed as .gpu-cut/cutlass-base.tar.xz: the
# wheel's nvidia_cutlass_dsl/ folder and its .pth) into /tmp/site-extra, where it waits for the next call.
# Usage (repo root, GPU host, carry [".gpu-cut"]): bash benchmarks/gpu/stage_extra.sh
set -euo pipefail
mkdir -p /tmp/site-extra
tar -xJf .gpu-cut/cutlass-base.tar.xz -C /tmp/site-extra
# cuda-python comes in the next call (host_env.sh), so a failed import here is reported, not fatal
PYTHONPATH=/tmp/site-extra/nvidia_cutlass_dsl/python_packages python3 -c 'import cutlass; print("cutlass", cutlass.__file__)' || true
du -sh /tmp/site-extra
