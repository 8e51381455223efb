#!/usr/bin/env bash
# Issues 19 and 21 on the optimized preset's own model in one GPU session: Qwen2.5-Coder-14B-Instruct GPTQ-Int4's
# shape (dummy weights), the preset's own knobs and serving settings, the H100 held to 16 GB by ballast.py.
# 1. (issue 19) run_autofit.sh: a second process holds 1 GiB, `vramkit up --runtime native --preset optimized`
#    re-plans for what NVML reads free, steps down and starts; the plans as asked and as started, SGLang's
#    context_len / KV tokens / max_req_input_len (KEEP_UP=1: the server stays up, with a stand-in tokenizer);
# 2. (issue 21) run_agents.sh SKIP_UP=1 against that server: tools and stream requests, the started plan's
#    longest prompt vs SGLang's max_req_input_len, `vramkit client`, `vramkit bench --suites agent`.
# Then down. Results packed in /tmp/gpuwork/res.tgz (wait_driver.sh copies it under $OUT).
#
# The marlin JIT: a fresh host compiles the GPTQ kernels inside the first start (~6.5 min, more than this run's
# device time). They need no GPU: JIT_CACHE names a tar.gz of a TVM_FFI_CACHE_DIR holding them, built beforehand
# on any x86-64 machine with nvcc 13.0 and the archive's SGLang and apache-tvm-ffi (0.1.15.post2):
#   CUDA_HOME=/usr/local/cuda-13.0 TVM_FFI_CACHE_DIR=DIR CUDA_VISIBLE_DEVICES= python3 benchmarks/gpu/prewarm_jit.py \
#     --arch 9.0 --dtype float16 --dense-only; tar -czf jit.tgz -C DIR .
# SGLang's load_jit keys the cache on the sources' hash, the arch (9.0 on the H100/H200) and tvm-ffi's version, and
# loads a prebuilt .so without compiling. This driver first checks that it does (60 s at most), and stops if not.
#
# Usage (repo root on the GPU host; .gpu/ the SGLang archive):
#   BALLAST=.../ballast.py JIT_CACHE=.../jit.tgz setsid nohup bash benchmarks/gpu/run_gptq_agents.sh \
#     > /tmp/gpuwork/driver.log 2>&1 &
#   OUT=$OUT bash benchmarks/gpu/wait_driver.sh 540
set -u
W=/tmp/gpuwork RES=/tmp/gpuwork/res; mkdir -p $RES
progress() { echo "$(date -u +%T) $*" | tee -a $RES/progress.txt; }
finish() { progress "$1"; (cd $W && tar -czf res.tgz res); progress DONE; exit 0; }
MODEL=qwen2.5-coder-14b-instruct-gptq-int4 NAME=vramkit-optimized TOK=/tmp/standin-tokenizer
MODEL_PATH=config/models/$MODEL
export BALLAST=${BALLAST:?the path of ballast.py} JIT_CACHE=${JIT_CACHE:-}
progress "start on $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
. benchmarks/gpu/host_env.sh
progress "archive unpacked; JIT cache: $(ls $TVM_FFI_CACHE_DIR 2>/dev/null | tr '\n' ' ')"
python3 benchmarks/gpu/standin_tokenizer.py "$MODEL_PATH" $TOK > $W/tokenizer.txt 2>&1 &
# the server's own lookup (GPU arch read from the card): a prebuilt module loads in seconds, a missing one compiles
timeout 60 python3 -c "
import time, torch
t0 = time.time()
from sglang.jit_kernel.gptq_marlin import _jit_gptq_marlin_module
from sglang.jit_kernel.gptq_marlin_repack import _jit_gptq_marlin_repack_module
_jit_gptq_marlin_repack_module(); _jit_gptq_marlin_module(torch.float16)
print(f'marlin JIT modules loaded in {time.time() - t0:.1f} s', flush=True)" > $RES/jit-check.txt 2>&1
jit_rc=$?; wait
progress "JIT check rc=$jit_rc: $(tail -1 $RES/jit-check.txt)"
[ $jit_rc = 0 ] || finish "the marlin kernels are not prebuilt for this host: stopped before the start"

progress "issue 19: auto-fit start"
OUT=$RES MODEL=$MODEL MODEL_PATH=$MODEL_PATH NAME=$NAME BUDGET_GIB=16 HOLD_GIB=1 UP_ARGS="" KEEP_UP=1 \
  UP_EXTRA="$VRAMKIT_SGLANG_EXTRA_ARGS --tokenizer-path $TOK" RESULT=autofit-gptq.json \
  SHAPE_NOTE="qwen2.5-coder-14b-instruct-gptq-int4 (GPTQ-Int4, dummy weights), the optimized preset as it is (its knobs and serving settings, 8 GB host KV cache), stand-in tokenizer" \
  bash benchmarks/gpu/run_autofit.sh > $RES/autofit-driver.txt 2>&1
progress "$(grep '^===' $RES/autofit-driver.txt | tr '\n' ' ')"
if curl -sf http://127.0.0.1:30000/health > /dev/null; then
  progress "issue 21: probe + agent bench"
  RES=$RES SKIP_UP=1 PLAN_JSON=$RES/plan-started.json MODEL=$MODEL_PATH NAME=$NAME TAG=gptq \
    LABEL=agents-optimized-gptq14b-16g bash benchmarks/gpu/run_agents.sh > $RES/agents-driver.txt 2>&1
  progress "$(grep '^===' $RES/agents-driver.txt | tr '\n' ' ')"
fi
python3 -m vramkit down --name $NAME > $RES/down.txt 2>&1
kill $(cat /tmp/autofit-work/pids 2>/dev/null) 2>/dev/null
cp /tmp/autofit-work/*.txt $RES/ 2>/dev/null
finish "down"
