#!/usr/bin/env bash
# The CPU-expert kernels side by side on one CPU, no server, no GPU needed (~4-5 min on the GPU host): llama.cpp's ggml
# MoE layer (ggml_moe_bench.py: Q4_K in CPU_REPACK, Q8_0) and kt-kernel 0.5.1's (kt_decode_bench.py: AMXINT8,
# LLAMAFILE_Q4_K), the same thread counts, 8 distinct layers each, one machine. On the dev host (2 cores) ggml's
# layer took a ninth of kt-kernel's at one thread (benchmarks/results/gpu/cpu-moe-kernels/); this is the GPU host's
# figure at the kit's 12 threads, where llama.cpp's server spends 0.41 ms a CPU layer.
#   bash benchmarks/gpu/run_cpu_moe_kernels.sh          # results in $OUT/cpu-moe-kernels/ (else /tmp/cpu-moe-kernels/)
# Staging (the device call carries it): STAGE/kt/kt_kernel-0.5.1-*.whl, STAGE/whl/gguf-*.whl, STAGE/llama-src.tar.xz
# (benchmarks/gpu/stage_kt_avx2.sh and stage_llama_src.sh). THREADS: the counts (default 12,8,16); LAYERS (8).
set -u
STAGE=${STAGE:-.stage-w16}
R=${OUT:-/tmp}/cpu-moe-kernels
THREADS=${THREADS:-12,8,16}
LAYERS=${LAYERS:-8}
mkdir -p "$R"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$STAGE"/kt/kt_kernel-0.5.1-*.whl \
  "$STAGE"/whl/gguf-*.whl > "$R/pip.txt" 2>&1
export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
lscpu > "$R/lscpu.txt"
STAGE=$STAGE PY=python3 bash benchmarks/gpu/build_ggml.sh /tmp/gg cpu > "$R/build.txt" 2>&1 || { tail -20 "$R/build.txt"; exit 1; }
for t in Q4_K Q8_0; do
  timeout 400 python3 benchmarks/gpu/ggml_moe_bench.py --lib-dir /tmp/gg/lib-native --type $t --threads "$THREADS" \
    --layers "$LAYERS" --out "$R/ggml-$t.json" > "$R/ggml-$t.txt" 2>&1
done
# called layer by layer, as the kit's adapter would call it (the pool wakes 48 times a token, not once)
timeout 400 python3 benchmarks/gpu/ggml_moe_bench.py --lib-dir /tmp/gg/lib-native --type Q4_K --threads "$THREADS" \
  --layers "$LAYERS" --per-layer --out "$R/ggml-Q4_K-per-layer.json" > "$R/ggml-Q4_K-per-layer.txt" 2>&1
KT_GGML_LIB=/tmp/gg/lib-native/libggml-base.so KT_KERNEL_CPU_VARIANT=amx timeout 900 python3 \
  benchmarks/gpu/kt_decode_bench.py --methods AMXINT8,LLAMAFILE_Q4_K --threads "$THREADS" --gpu-experts 0 --layers "$LAYERS" \
  --tokens 24 --prefill 512 --out "$R/kt.json" > "$R/kt.txt" 2>&1
grep -h '^{' "$R"/ggml-*.txt "$R"/kt.txt
