#!/usr/bin/env bash
# The dashboard's GPU-host run (issue 13): the optimized preset started by the kit (native runtime, dummy
# weights of the real shapes, the card held to 16 GiB free by ballast.py as in run_calibration.sh), one
# long prompt served so the card holds its peak (PyTorch's caching allocator keeps it), then
# `vramkit dashboard --capture` writes every panel's JSON, and the server is stopped.
# Usage (repo root, GPU host, .gpu/ holding the SGLang archive and ballast.py):
#   CAP=$OUT/dashboard-capture bash benchmarks/gpu/dashboard_capture.sh
# Then, on a machine with a browser (this repository's set-up has chromium):
#   cp -r <CAP> benchmarks/results/gpu/dashboard-capture
#   make dashboard-screenshots REPLAY=benchmarks/results/gpu/dashboard-capture PANELS="server live"
set -u
CAP=${CAP:-/tmp/gpuwork/dashboard-capture}
WORK=${WORK:-/tmp/gpuwork}; mkdir -p "$WORK"
. benchmarks/gpu/host_env.sh   # SGLang archive, PYTHONPATH, the archive's extra flags
# MODEL: the catalogued model to start (default the optimized preset's 14B GPTQ; a bf16 model skips the marlin JIT)
M14=${MODEL:-qwen2.5-coder-14b-instruct-gptq-int4}
step() { echo "=== $(date +%T) $*"; }

step "ballast: 16 GiB free on GPU 0"
CUDA_VISIBLE_DEVICES=0 python3 .gpu/ballast.py 16 > "$WORK/ballast.txt" 2>&1 &
ballast_pid=$!
trap 'python3 -m vramkit down --name vramkit-optimized >/dev/null 2>&1; kill $ballast_pid 2>/dev/null' EXIT
for _ in $(seq 60); do grep -q holding "$WORK/ballast.txt" && break; sleep 1; done

step "vramkit up --preset optimized (native, dummy weights; the first GPTQ start compiles marlin kernels, ~6 min)"
python3 -m vramkit up --runtime native --name vramkit-optimized --model $M14 --model-path config/models/$M14 \
    --load-format dummy --no-fit-check --timeout 900 --gpus 0 --preset optimized || exit 1

step "one long prompt (the context sweep up to the longest the pool takes), so NVML holds the peak"
timeout 600 python3 -m vramkit bench --suites context --quick --vocab-size 151000 --no-plots \
    --label dashboard-capture --out "$WORK/dashboard-bench.json" | tail -3

step "vramkit dashboard --capture $CAP"
export VRAMKIT_DEVICE_LABEL="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0), memory emulated at 16 GB (ballast.py)"
python3 -m vramkit dashboard --capture "$CAP" --samples 10 || exit 1
ls -la "$CAP"
