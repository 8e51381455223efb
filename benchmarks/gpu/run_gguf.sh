#!/usr/bin/env bash
# Issue 19 item 1 (GGUF) on the GPU host: SGLang 0.5.15.post1 serving random-weight GGUFs of catalogued dense
# Qwen2 shapes (tools/make_random_gguf.py, written there), on an H100 held to 16 GiB free by ballast.py, with the
# planner's knobs spelled out; the log's weight GiB and KV tokens are compared with `vramkit plan --model X.gguf`
# afterwards (benchmarks/gpu/gguf_report.py).
#   1. qwen2.5-coder-7b-instruct in Q4_K_M (Q4_K, with Q6_K attn_v / ffn_down on llama-quantize's use_more_bits
#      layers and a Q6_K output.weight: the fused qkv of those layers mixes two types)
#   2. qwen2.5-0.5b-instruct in Q8_0 (tied embeddings: no output.weight; every matrix Q8_0, 1-D tensors F32),
#      when time is left
# Usage (repo root on the GPU host; .gpu/ the SGLang archive, $STAGE/ballast.py):
#   OUT=/tmp/out bash benchmarks/gpu/run_gguf.sh
# Writes $OUT/gguf-<name>.log (SGLang's log), $OUT/gguf-<name>.json (file, nvml free, served tokens), progress.txt.
set -u
OUT=${OUT:-/tmp/gguf-out}; W=/tmp/gguf-work; mkdir -p "$OUT" "$W"
STAGE=${STAGE:-.stage-gguf}
BUDGET_GIB=${BUDGET_GIB:-16} TIME_LEFT_FOR_SECOND=${TIME_LEFT_FOR_SECOND:-170}
t0=$(date +%s); elapsed() { echo $(( $(date +%s) - t0 )); }
step() { echo "=== $(elapsed) s $*" | tee -a "$OUT/progress.txt"; }
WRITER=${WRITER:-tools/make_random_gguf.py}    # $STAGE/make_random_gguf.py when the tree sent is older
# the gguf package (pure Python) for the writer: the archive's, or $STAGE/pylib's while the archive unpacks
F7=$W/qwen2.5-coder-7b-instruct-Q4_K_M.gguf F05=$W/qwen2.5-0.5b-instruct-Q8_0.gguf
( export PYTHONPATH=$STAGE/pylib:${PYTHONPATH:-}
  python3 $WRITER config/models/qwen2.5-coder-7b-instruct $F7 --type Q4_K_M > "$W/write-7b.json" 2>&1
  python3 $WRITER config/models/qwen2.5-0.5b-instruct $F05 --type Q8_0 > "$W/write-05.json" 2>&1 ) & writer_pid=$!
. benchmarks/gpu/host_env.sh
step "archive unpacked"
python3 "$STAGE/ballast.py" "$BUDGET_GIB" > "$W/ballast.txt" 2>&1 & ballast_pid=$!
for i in $(seq 90); do grep -q holding "$W/ballast.txt" && break; sleep 1; done
wait $writer_pid
step "ballast: $(cat $W/ballast.txt); files: $(cat $W/write-7b.json) $(cat $W/write-05.json)"

serve() {  # name file
  local name=$1 file=$2 pid ok=0
  local free_mib; free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0)
  step "$name: start ($(nvidia-smi --query-gpu=name,memory.total,memory.used,memory.free --format=csv,noheader -i 0))"
  # the planner's knobs, spelled out (vramkit plan ... --mem-fraction 0.8 --context 32k --chunked-prefill 2048
  # --max-running 64 --cuda-graph-max-bs 8)
  python3 -m sglang.launch_server --model-path "$file" --skip-tokenizer-init --host 127.0.0.1 --port 30000 \
    --mem-fraction-static 0.8 --context-length 32768 --kv-cache-dtype auto --chunked-prefill-size 2048 \
    --max-running-requests 64 --cuda-graph-max-bs-decode 8 --disable-prefill-cuda-graph $VRAMKIT_SGLANG_EXTRA_ARGS \
    > "$OUT/gguf-$name.log" 2>&1 & pid=$!
  for i in $(seq 240); do
    grep -q "The server is fired up" "$OUT/gguf-$name.log" && { ok=1; break; }
    kill -0 $pid 2>/dev/null || break
    sleep 1
  done
  local gen=""
  if [ $ok = 1 ]; then
    gen=$(curl -s -m 60 127.0.0.1:30000/generate -H 'Content-Type: application/json' \
      -d '{"input_ids": [100, 200, 300, 400, 500, 600, 700, 800], "sampling_params": {"max_new_tokens": 16, "temperature": 0}}')
    curl -s -m 10 127.0.0.1:30000/server_info > "$W/info-$name.json"
  fi
  step "$name: ready=$ok generate=${gen:0:300}"
  kill $pid 2>/dev/null; for i in $(seq 30); do kill -0 $pid 2>/dev/null || break; sleep 1; done; kill -9 $pid 2>/dev/null
  pkill -P $pid 2>/dev/null; sleep 2
  NAME=$name FILE=$file FREE_MIB=$free_mib OK=$ok GEN=$gen python3 - "$OUT/gguf-$name.json" <<'EOF'
import json, os, sys
from datetime import datetime, timezone
import torch, sglang
gen = os.environ["GEN"]
try:
    out = json.loads(gen)
except ValueError:
    out = None
print(json.dumps({"name": os.environ["NAME"], "file": os.path.basename(os.environ["FILE"]),
                  "file_bytes": os.path.getsize(os.environ["FILE"]), "nvml_free_mib_at_start": int(os.environ["FREE_MIB"]),
                  "device": torch.cuda.get_device_name(0), "versions": {"sglang": sglang.__version__,
                  "torch": torch.__version__}, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "ready": os.environ["OK"] == "1",
                  "output_ids": (out or {}).get("output_ids") if isinstance(out, dict) else None,
                  "generate_raw": None if out else gen[:500]}, indent=1), file=open(sys.argv[1], "w"))
EOF
}

serve qwen2.5-coder-7b-instruct-Q4_K_M $F7
if [ "$(elapsed)" -lt "$TIME_LEFT_FOR_SECOND" ]; then
  serve qwen2.5-0.5b-instruct-Q8_0 $F05
else
  step "no time for the 0.5B Q8_0 ($(elapsed) s)"
fi
kill $ballast_pid 2>/dev/null; wait 2>/dev/null
step "done"
