#!/usr/bin/env bash
# Issue 12 on the GPU host: Qwen3-Coder-30B-A3B (random block-FP8 checkpoint written there) with its
# experts split between the GPU and host RAM through SGLang's KTransformers path (kt-kernel 0.5.1 +
# services/sglang-kt/kt_compat), on an H100 emulated at 16 GB. Detached; poll $RES/progress.txt.
# Staging (here): .gpu/ holds the SGLang archive and ballast.py (../shared/gpu/), and .gpu/kt/ the cp312
# kt-kernel wheel (`pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
# manylinux_2_17_x86_64 -d .gpu/kt kt-kernel==0.5.1`) and libhwloc15's .deb (`apt-get download libhwloc15`,
# used only if the host lacks it; the H100 host had it).
# Usage (repo root on the GPU host):
#   setsid nohup bash benchmarks/gpu/run_moe.sh SESSION > /tmp/moe/driver.log 2>&1 &
# (2026-11-23 the preset's kt_method was FP8; it is AMXINT4 since, so the FP8 points name it.)
# SESSION:
#   probe  runtime first: checkpoint, host bandwidth, SGLang started directly with --kt-* (AMX), probe
#   kit    every point through `vramkit up --runtime native`: AMX, AVX-512, layer offload; bench suites
set -u
SESSION=${1:?usage: run_moe.sh probe|kit}
RES=${RES:-/tmp/moe/res}; mkdir -p "$RES/logs"
CK=${CK:-/tmp/ck/qwen3-coder-30b-a3b-instruct-fp8}
MODEL_CFG=config/models/qwen3-coder-30b-a3b-instruct
step() { echo "=== $(date +%T) $*" | tee -a "$RES/progress.txt"; }
t_start=$(date +%s); elapsed() { echo $(( $(date +%s) - t_start )); }

step "host"
{ lscpu; free -g; df -h /tmp; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; } > "$RES/host.txt" 2>&1
PHYS=$(lscpu -p=core,socket | grep -v '^#' | sort -u | wc -l)
step "physical cores $PHYS, logical $(nproc)"

step "site + checkpoint (in parallel)"
( [ -d /tmp/site/sglang ] || { mkdir -p /tmp/site && tar -xJf .gpu/sglang-*.tar.xz -C /tmp/site; }
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/kt/kt_kernel-0.5.1-*.whl ) \
  > "$RES/logs/site.txt" 2>&1 &
site_pid=$!
if [ ! -f "$CK/config.json" ]; then
  python3 tools/make_random_checkpoint.py "$MODEL_CFG" "$CK" --format fp8 --jobs 8 > "$RES/checkpoint.json" 2> "$RES/logs/checkpoint.err"
fi
wait $site_pid
step "checkpoint: $(cat "$RES/checkpoint.json" 2>/dev/null) ($(elapsed) s)"
export PYTHONPATH=/tmp/site:$PWD/services/sglang-kt/kt_compat:$PWD PYTHONUNBUFFERED=1
if ! python3 -c "import kt_kernel" > "$RES/logs/kt-import.txt" 2>&1; then
  mkdir -p /tmp/hw && for d in .gpu/kt/*.deb; do dpkg -x "$d" /tmp/hw; done
  export LD_LIBRARY_PATH=/tmp/hw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
python3 -c "import kt_kernel, kt_kernel.experts_base as b; print(kt_kernel.__version__, kt_kernel.__cpu_variant__, \
kt_kernel.KTMoEWrapper, hasattr(b.kt_kernel_ext.CPUInfer, 'submit_with_cuda_stream'))" >> "$RES/logs/kt-import.txt" 2>&1
step "kt_kernel: $(tail -1 "$RES/logs/kt-import.txt")"

step "host memory bandwidth"
python3 -c "
import json; from vramkit.adapters import membw
print(json.dumps(membw.sweep([1, 2, 4, 8, $PHYS], 4 << 30)))" > "$RES/membw.json" 2> "$RES/logs/membw.err"
step "membw $(cat "$RES/membw.json")"

ballast_pid=
ballast() { [ -n "$ballast_pid" ] && kill $ballast_pid 2>/dev/null; python3 .gpu/ballast.py "$1" > "$RES/logs/ballast.txt" 2>&1 &
  ballast_pid=$!; for i in $(seq 60); do grep -q holding "$RES/logs/ballast.txt" && break; sleep 1; done; }
SGL_COMMON="--attention-backend triton --sampling-backend pytorch --grammar-backend none --skip-tokenizer-init --disable-prefill-cuda-graph"
THREADS=${THREADS:-$((PHYS - 2))}

direct() {  # name variant extra-args...: SGLang started by hand (runtime proof), probed, stopped
  local name=$1 variant=$2; shift 2
  step "start $name (KT variant $variant, $THREADS threads)"
  KT_KERNEL_CPU_VARIANT=$variant python3 -m sglang.launch_server --model-path "$CK" --host 127.0.0.1 --port 30000 \
    --kt-weight-path "$CK" --kt-method FP8 --kt-cpuinfer "$THREADS" --kt-threadpool-count 1 \
    --kv-cache-dtype fp8_e5m2 --context-length 32768 --chunked-prefill-size 4096 --max-running-requests 8 \
    --cuda-graph-max-bs-decode 8 $SGL_COMMON "$@" > "$RES/logs/$name.server.log" 2>&1 &
  local pid=$! t0=$(date +%s)
  until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:30000/health', timeout=3)" 2>/dev/null; do
    kill -0 $pid 2>/dev/null || { step "$name died: $(grep -E 'Error|error' "$RES/logs/$name.server.log" | tail -3)"; return 1; }
    [ $(( $(date +%s) - t0 )) -gt 480 ] && { step "$name: no health in 480 s"; kill $pid; return 1; }
    sleep 2
  done
  step "$name healthy after $(( $(date +%s) - t0 )) s; peak so far $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
  free -g > "$RES/logs/$name.free.txt"
  timeout 300 python3 benchmarks/gpu/moe_probe.py --out "$RES/$name.probe.json" --label "$name" $PROBE_ARGS \
    2>&1 | tee -a "$RES/progress.txt"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader >> "$RES/logs/$name.free.txt"
  kill $pid; wait $pid 2>/dev/null; sleep 3
}

if [ "$SESSION" = probe ]; then
  ballast 16
  PROBE_ARGS="" direct kt-amx-g32 amx --kt-num-gpu-experts 32 --mem-fraction-static 0.85
  [ "$(elapsed)" -lt 420 ] && PROBE_ARGS="--ttft 512" direct kt-avx512-g32 avx512_bf16 --kt-num-gpu-experts 32 --mem-fraction-static 0.85
fi
if [ "$SESSION" = kit ]; then
  ballast 16
  export VRAMKIT_SERVER_PYTHON=python3 VRAMKIT_STATE_DIR=/tmp/vk-state VRAMKIT_DEVICE_LABEL="H100 80GB HBM3, memory emulated at 16 GB"
  export VRAMKIT_SGLANG_EXTRA_ARGS="--attention-backend triton --sampling-backend pytorch --grammar-backend none --skip-tokenizer-init"
  BW=$(python3 -c "import json; print(round(max(r['bytes_per_s'] for r in json.load(open('$RES/membw.json'))) / 1e9, 1))")
  export VRAMKIT_HOST_READ_GBS=$BW
  B="--vocab-size 151000"
  point() { local n=$1; shift; step "point $n"; timeout 900 python3 benchmarks/gpu/moe_point.py --name "$n" --out "$RES" "$@" \
    2>&1 | tail -12 | tee -a "$RES/progress.txt"; }
  python3 -m vramkit plan --json --preset moe --kt-method FP8 --gpu auto > "$RES/plan-moe.json" 2> "$RES/logs/plan-moe.err"
  point moe-16g-fp8-amx --probe="--new-tokens 128 --ttft 512,8192" \
    --bench="--suites latency --quick $B --label fp8-amx-16g --out $RES/moe-16g.json --planner-json $RES/plan-moe.json" \
    -- --preset moe --kt-method FP8 --model-path "$CK"
  # layer offload of the same checkpoint beside it (2026-11-23: the lease ended before this point, run last
  # then, reported; it runs second now)
  point moe-16g-offload --probe="--new-tokens 8 --streams 1 --ttft=" -- --model qwen3-coder-30b-a3b-instruct-fp8 \
    --model-path "$CK" --load-format dummy --context 32768 --kv-dtype fp8_e5m2 --mem-fraction 0.85 \
    --chunked-prefill 4096 --cuda-graph-max-bs 4 --max-running 4 --cpu-offload-gib 18
  step "KT AMXINT4 layout"
  [ -d /tmp/ck/kt-int4 ] || python3 tools/make_random_checkpoint.py "$MODEL_CFG" /tmp/ck/kt-int4 --kt-layout AMXINT4 \
    --kt-threads "$THREADS" > "$RES/kt-int4.json" 2> "$RES/logs/kt-int4.err"
  step "int4 layout: $(cat "$RES/kt-int4.json")"
  python3 -m vramkit plan --json --preset moe --gpu auto --kt-method AMXINT4 --kt-weight-path /tmp/ck/kt-int4 \
    > "$RES/plan-moe-int4.json" 2>> "$RES/logs/plan-moe.err"
  point moe-16g-int4-amx --probe="--new-tokens 128 --ttft 512,8192,30000" \
    --bench="--suites latency --quick $B --label int4-amx-16g --out $RES/moe-16g-int4.json --planner-json $RES/plan-moe-int4.json" \
    -- --preset moe --model-path "$CK" --kt-method AMXINT4 --kt-weight-path /tmp/ck/kt-int4
  point moe-16g-fp8-avx512 --env KT_KERNEL_CPU_VARIANT=avx512_bf16 --probe="--new-tokens 64 --streams 1 --ttft 512" \
    -- --preset moe --kt-method FP8 --model-path "$CK"
fi
step "done ($(elapsed) s)"
