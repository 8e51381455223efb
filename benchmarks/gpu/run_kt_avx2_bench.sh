#!/usr/bin/env bash
# Issue 18 item 4, kernel level on THIS machine's CPU: kt-kernel's CPU-expert time per token with kt-kernel 0.7.0's
# avx2 build (the first without AVX-512 code: benchmarks/results/gpu/kt-isa.md) against 0.5.1's avx2 build (which
# carries AVX-512 code, the build the committed LLAMAFILE_Q8_0 server runs forced) and 0.5.1's avx512_bf16 build.
# Same process per build and method (benchmarks/gpu/kt_decode_bench.py: Qwen3-Coder-30B-A3B's MoE layer shape,
# 43 of 128 experts masked as on the GPU, batch 1, 48 layers a token cycled over --layers distinct ones); the builds
# alternate, ROUNDS times, so a noisy shared host skews them alike. Needs kt-kernel 0.5.1 in .venv and 0.7.0 at
# .venv/kt-avx2 (make setup-kt-test), ~10 GB of RAM. Usage: bash benchmarks/gpu/run_kt_avx2_bench.sh OUT_DIR
set -eu
OUT=${1:?usage: run_kt_avx2_bench.sh OUT_DIR}; mkdir -p "$OUT"
PY=.venv/bin/python; B=benchmarks/gpu/kt_decode_bench.py
ARGS="--threads ${THREADS:-2} --gpu-experts 43 --layers ${LAYERS:-4} --tokens ${TOKENS:-40} --prefill 0"
{ lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-400; date -u +%FT%TZ; } > "$OUT/host.txt"
for rep in $(seq "${ROUNDS:-2}"); do
  KT_KERNEL_CPU_VARIANT=avx2 PYTHONPATH=.venv/kt-avx2 $PY $B --methods LLAMAFILE_Q8_0,FP8 $ARGS \
    --out "$OUT/kt070-avx2-r$rep.json" > "$OUT/kt070-avx2-r$rep.log" 2>&1
  KT_KERNEL_CPU_VARIANT=avx2 $PY $B --methods LLAMAFILE_Q8_0 $ARGS --out "$OUT/kt051-avx2-r$rep.json" \
    > "$OUT/kt051-avx2-r$rep.log" 2>&1
  # 0.5.1 frees a LLAMAFILE layer with a double free (0.7.0 added the destructors): one method per process
  for m in LLAMAFILE_Q8_0 FP8; do
    $PY $B --methods $m $ARGS --out "$OUT/kt051-avx512-$m-r$rep.json" > "$OUT/kt051-avx512-$m-r$rep.log" 2>&1 || true
  done
done
