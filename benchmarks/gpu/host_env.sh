# Sourced by the GPU-host scripts (run_calibration.sh, dashboard_capture.sh) from the repo root: the SGLang
# archive on PYTHONPATH, the kit's native runtime pointed at the host's python3, and the flags the archive
# needs (it has no FA3 and no xgrammar: config/sglang.toml's gpu_host_extra_args, checked by SGLang's parser in CI).
[ -d /tmp/site/sglang ] || { mkdir -p /tmp/site && tar -xJf .gpu/sglang-*.tar.xz -C /tmp/site; }
# SGLang 0.5.15.post1 requires nvidia-cutlass-dsl and cuda-python (its metadata; deepseek_v2 imports the DSA
# indexer's CuTe DSL kernel at module level, so MLA models do not import without them). The archive lacks them.
# The CuTe DSL (50 MB packed) does not travel with the archive in one call (64 MiB): benchmarks/gpu/stage_extra.sh
# unpacks it to /tmp/site-extra in a first call; cuda-python's wheels travel in .gpu/ and are installed here.
EXTRA=/tmp/site-extra
[ -d $EXTRA/cuda/bindings ] || { ls .gpu/cuda_*.whl > /dev/null 2>&1 && \
  python3 -m pip install -q --no-index --no-deps --no-compile --target $EXTRA .gpu/cuda_*.whl; }
export PYTHONPATH=/tmp/site:$EXTRA:$EXTRA/nvidia_cutlass_dsl/python_packages:$PWD PYTHONUNBUFFERED=1 VRAMKIT_SERVER_PYTHON=python3 VRAMKIT_STATE_DIR=/tmp/vk-state
# JIT kernels built before (a tarball of a TVM_FFI_CACHE_DIR, .tar.gz as the drivers bring it back or .tar.xz, half the
# size, to carry beside the archive: the GPTQ marlin kernels take ~8 min to compile on a fresh host;
# run_gptq_agents.sh says how one is built without a GPU)
export TVM_FFI_CACHE_DIR=/tmp/tvm-ffi-cache
JIT_CACHE=${JIT_CACHE:-$(ls .gpu/tvm-ffi-cache.tar.* 2>/dev/null | head -1)}
[ -n "$JIT_CACHE" ] && [ -f "$JIT_CACHE" ] && mkdir -p $TVM_FFI_CACHE_DIR && tar -xf "$JIT_CACHE" -C $TVM_FFI_CACHE_DIR
VRAMKIT_SGLANG_EXTRA_ARGS=$(python3 -c 'import tomllib; print(" ".join(tomllib.load(open("config/sglang.toml", "rb"))["gpu_host_extra_args"]))')
export VRAMKIT_SGLANG_EXTRA_ARGS
