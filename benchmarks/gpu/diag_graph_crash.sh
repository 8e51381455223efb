#!/usr/bin/env bash
# Diagnose the README's trap: "GPTQ-Int4 with decode CUDA graphs on: the scheduler died during graph
# capture, with no Python traceback (16 GB emulation)". Runs on the GPU host, raw SGLang on purpose
# (this is a diagnosis of SGLang itself, not a kit measurement). Writes logs under $OUT/diag/.
# Usage: bash benchmarks/gpu/diag_graph_crash.sh   (expects .gpu/ with the SGLang archive)
set -u
OUT=${RESULTS:-/tmp/gpuwork/out}; mkdir -p "$OUT/diag"
[ -d /tmp/site/sglang ] || { mkdir -p /tmp/site && tar -xJf .gpu/sglang-*.tar.xz -C /tmp/site; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-/tmp/tvm-ffi-cache}
[ -f .gpu/tvm-ffi-cache.tar.gz ] && mkdir -p "$TVM_FFI_CACHE_DIR" && tar -xzf .gpu/tvm-ffi-cache.tar.gz -C "$TVM_FFI_CACHE_DIR"
MODEL=/tmp/models/qwen14-gptq; mkdir -p $MODEL; cp config/models/qwen2.5-coder-14b-instruct-gptq-int4/config.json $MODEL/ 2>/dev/null || cp "${SHARED:-../shared}/gpu/models/qwen2.5-14b-gptq-int4/config.json" $MODEL/
python3 "${BALLAST:-.gpu/ballast.py}" 16 > "$OUT/diag/ballast.log" 2>&1 &
bpid=$!
for i in $(seq 60); do grep -q holding "$OUT/diag/ballast.log" && break; sleep 1; done
cat "$OUT/diag/ballast.log"
# this host's SGLang flags (config/sglang.toml: its archive has no FA3 and no grammar backend)
HOST_EXTRA=$(python3 -c 'import tomllib; print(" ".join(tomllib.load(open("config/sglang.toml", "rb"))["gpu_host_extra_args"]))')
run_case() {  # name, extra args...
  local name=$1; shift
  local log="$OUT/diag/$name.log"
  echo "=== $name: $*" | tee -a "$OUT/diag/summary.txt"
  python3 -m sglang.launch_server --model-path $MODEL --load-format dummy --skip-tokenizer-init \
    $HOST_EXTRA \
    --disable-prefill-cuda-graph --host 127.0.0.1 --port 30000 "$@" > "$log" 2>&1 &
  local pid=$! t0=$SECONDS ok=0
  while kill -0 $pid 2>/dev/null; do
    if curl -sf 127.0.0.1:30000/health >/dev/null 2>&1; then ok=1; break; fi
    [ $((SECONDS - t0)) -gt ${CASE_TIMEOUT:-420} ] && break
    sleep 2
  done
  if [ $ok = 1 ]; then
    echo "UP after $((SECONDS - t0)) s" | tee -a "$OUT/diag/summary.txt"
    curl -s 127.0.0.1:30000/generate -H 'Content-Type: application/json' \
      -d '{"input_ids":[1,2,3,4,5,6,7,8],"sampling_params":{"max_new_tokens":32,"temperature":0,"ignore_eos":true}}' | head -c 300 >> "$OUT/diag/summary.txt"; echo >> "$OUT/diag/summary.txt"
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader >> "$OUT/diag/summary.txt"
    kill $pid; wait $pid 2>/dev/null
  else
    wait $pid; echo "DIED rc=$? after $((SECONDS - t0)) s" | tee -a "$OUT/diag/summary.txt"
  fi
  grep -E "avail mem|KV Cache|max_total_num_tokens|Capture|Error|error|Killed|Segmentation|Fatal|dead|Traceback|signal" "$log" | tail -25 >> "$OUT/diag/summary.txt"
  pkill -f sglang.launch_server; sleep 3
}
run_case gptq_graph_bs8_f080 --mem-fraction-static 0.80 --chunked-prefill-size 2048 --cuda-graph-max-bs-decode 8
run_case gptq_nograph_f080 --mem-fraction-static 0.80 --chunked-prefill-size 2048 --disable-cuda-graph
(cd "$TVM_FFI_CACHE_DIR" && tar -czf "$OUT/tvm-ffi-cache.tar.gz" .) ; ls -la "$OUT"
dmesg 2>/dev/null | tail -20 > "$OUT/diag/dmesg.txt"
kill $bpid
echo DRIVER-DONE >> "$OUT/diag/summary.txt"
