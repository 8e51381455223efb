#!/usr/bin/env bash
# The kit's end-to-end GPU session (issue 5): every configuration started through `vramkit up`
# (RUNTIME=native, dummy weights of the real shapes), measured, benchmarked, stopped.
# Runs detached on the GPU host; results accumulate in $RES and are packed into $RES.tgz after each point.
# Usage (repo root, GPU host, .gpu/ holding the SGLang archive, ballast.py and the JIT cache):
#   setsid nohup bash benchmarks/gpu/run_calibration.sh SESSION > /tmp/gpuwork/driver.log 2>&1 &
# SESSION (each one a device session's worth):
#   first  (H100)      the 9 calibration points and the first preset benches (2026-11-22, session 1)
#   final  (H100)      the optimized preset at its final settings (fraction 0.85 + 8 GB host cache) with
#                      every bench suite, its host-cache A/B at 0.85, and the two points whose peak was lost
#   embed  (one GPU)   the optimized preset with its token embeddings in host RAM (--kt-embed-host on) beside it
#   embed2 (one GPU)   the same on another machine, the embeddings-on-the-GPU control first
#   realload (one GPU) the optimized preset's 14B GPTQ-Int4 from a checkpoint on disk beside its dummy twin (not run yet)
#   tp2    (2 GPUs)    tensor parallel 2, each card emulated at 16 GB: per-rank figures for the planner.
#                      Dense models: a fresh host compiles the GPTQ marlin kernels for ~6 min, more than a
#                      session's device time; the 7B in bf16 does not fit one 16 GB card, and fits two.
#   models (H100)      issue 9: every model family the planner added (MoE bf16 / FP8 / GPTQ marlin MoE, MoE with
#                      --cpu-offload-gb on 24 GB, MLA, Gemma 2's sliding window, a folder model), emulated 16 and
#                      24 GB and the whole card; GPTQ last (a fresh host JIT-compiles marlin MoE for minutes)
#   pinned (H100)      host RAM that --cpu-offload-gb pins (Qwen3-8B with 0 and 8 GiB offloaded on 24 GB: PyTorch pins
#                      each tensor at a power of two) and Qwen2-MoE GPTQ (shared expert + gate, marlin MoE) on 16 GB
#   gptoss (H100)      gpt-oss-20b through the marlin MoE runner (the RTX 50 layout), after its JIT kernels compile
#   rest   (H100)      issue 9's points the 'models' session could not reach (2026-11-24): MLA (the CuTe DSL staged
#                      first by stage_extra.sh), MoE with --cpu-offload-gb on 24 GB, the folder model, GPTQ marlin
#                      MoE (its JIT kernels compiled meanwhile by prewarm_jit.py, GPU hidden), MLA + offload, Gemma 3
set -u
SESSION=${1:?usage: run_calibration.sh first|final|embed|embed2|realload|tp2|models|rest|mla|pinned|gptoss}
RES=${RES:-/tmp/gpuwork/res}; mkdir -p "$RES/cal" "$RES/bench" "$RES/logs"
. benchmarks/gpu/host_env.sh   # SGLang archive, PYTHONPATH, the archive's extra flags
# the multi-GPU hosts: NVLink multicast stays off (the device tool's KINDS.md: it can take shared GPUs down)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VRAMKIT_DEVICE_LABEL
PACK=${PACK:-/tmp/gpuwork/res.tgz}   # the device tool: PACK=$OUT/res.tgz, so a run cut short still returns its points
pack() { (cd "$RES" && tar -czf "$PACK" .); }
step() { echo "=== $(date +%T) $*" | tee -a "$RES/progress.txt"; }

GPUS=${GPUS:-0}; ballast_pid=
ballast() {  # GiB to leave free on each of GPUS (default 0), or 0 for the whole card(s)
  local pid g; for pid in $ballast_pid; do kill $pid 2>/dev/null; wait $pid 2>/dev/null; done; ballast_pid=
  [ "$1" = 0 ] && return
  for g in ${GPUS//,/ }; do
    CUDA_VISIBLE_DEVICES=$g python3 .gpu/ballast.py "$1" > "$RES/logs/ballast-$1-gpu$g.txt" 2>&1 &
    ballast_pid="$ballast_pid $!"
  done
  for g in ${GPUS//,/ }; do
    for i in $(seq 60); do grep -q holding "$RES/logs/ballast-$1-gpu$g.txt" && break; sleep 1; done
  done
}
point() {  # name model budget "bench args" -- up args
  local name=$1 model=$2 budget=$3 bench=$4; shift 4
  step "$name"
  timeout 900 python3 benchmarks/gpu/calibrate_point.py --name "$name" --model "$model" --budget-gib "$budget" \
    --out "$RES/cal" --gpus "$GPUS" --bench "$bench" "$@" 2>&1 | tail -3 | tee -a "$RES/progress.txt"
  pack
}
B="--vocab-size 151000 --no-plots"
M14=qwen2.5-coder-14b-instruct-gptq-int4

session_first() {
  step "nvml vs nvidia-smi"
  timeout 150 python3 benchmarks/gpu/nvml_vs_smi.py "$RES/nvml-vs-smi.json" > "$RES/logs/nvml-vs-smi.txt" 2>&1
  pack

  ballast 16; VRAMKIT_DEVICE_LABEL="H100 80GB HBM3, memory emulated at 16 GB"
  python3 -m vramkit plan --json --gpu h100-80gb --gpu-free-gib 15.33 --preset optimized > "$RES/bench/plan-optimized.json"
  point opt-16g $M14 16 \
    "--suites latency,concurrency,capacity,context,multiturn --quick --sessions 6 $B --label optimized-16g --out $RES/bench/optimized-16g.json --planner-json $RES/bench/plan-optimized.json" \
    -- --preset optimized
  point opt-nohicache-16g $M14 16 \
    "--suites multiturn --quick --sessions 6 $B --label hicache-off-16g --out $RES/bench/hicache-off-16g.json" \
    -- --preset optimized --hicache-gb 0
  python3 -m vramkit plan --json --gpu h100-80gb --gpu-free-gib 15.33 --preset baseline > "$RES/bench/plan-baseline.json"
  point baseline-16g $M14 16 \
    "--suites latency,concurrency,capacity,context --quick $B --label baseline-16g --out $RES/bench/baseline-16g.json --planner-json $RES/bench/plan-baseline.json" \
    -- --preset baseline
  point fp16-f080-16g $M14 16 "" -- --preset baseline --mem-fraction 0.80 --max-running 8
  point fp8-f085-16g $M14 16 "" -- --preset optimized --hicache-gb 0 --mem-fraction 0.85
  point fp8-f090-16g $M14 16 "" -- --preset optimized --hicache-gb 0 --mem-fraction 0.90
  python3 -m vramkit plan --json --gpu h100-80gb --gpu-free-gib 15.33 --preset 128k > "$RES/bench/plan-128k.json"
  point 128k-7b-16g qwen2.5-coder-7b-instruct-gptq-int4 16 \
    "--suites latency --quick $B --label 128k-16g --out $RES/bench/128k-16g.json --planner-json $RES/bench/plan-128k.json" \
    --probe-fraction 1.0 -- --preset 128k
  ballast 24; VRAMKIT_DEVICE_LABEL="H100 80GB HBM3, memory emulated at 24 GB"
  point fp8-f080-24g $M14 24 "" -- --preset optimized --hicache-gb 0
  ballast 0; VRAMKIT_DEVICE_LABEL="H100 80GB HBM3 (whole card)"
  point qwen05b-full qwen2.5-0.5b-instruct 0 "" -- --model qwen2.5-0.5b-instruct --context 32768 --kv-dtype auto \
    --mem-fraction 0.5 --chunked-prefill 4096 --cuda-graph-max-bs 16 --max-running 16
}

session_final() {  # the optimized preset as it now ships: fraction 0.85 + 8 GB host cache
  ballast 16; VRAMKIT_DEVICE_LABEL="H100 80GB HBM3, memory emulated at 16 GB"
  python3 -m vramkit plan --json --gpu h100-80gb --gpu-free-gib 15.33 --preset optimized > "$RES/bench/plan-optimized.json"
  point opt-f085-16g $M14 16 \
    "--suites latency,concurrency,capacity,context,multiturn --quick --sessions 6 $B --label optimized-16g --out $RES/bench/optimized-16g.json --planner-json $RES/bench/plan-optimized.json" \
    -- --preset optimized
  point opt-nohicache-f085-16g $M14 16 \
    "--suites multiturn --quick --sessions 6 $B --label hicache-off-16g --out $RES/bench/hicache-off-16g.json" \
    -- --preset optimized --hicache-gb 0
  # the first session's two points whose peak the JSON writer lost
  point fp16-f080-16g $M14 16 "" -- --preset baseline --mem-fraction 0.80 --max-running 8
  point opt-nohicache-16g $M14 16 "" -- --preset optimized --hicache-gb 0 --mem-fraction 0.80
}

session_embed() {  # the optimized preset's 14B with its token embeddings in pinned host RAM (--kt-embed-host on: 1.45
  # GiB; the plan's pool 50,200 tokens against 34,349 on an RTX 5060 Ti 16GB) beside the preset with them on the GPU,
  # one machine at 16 GB: the pool against the plan, the latency suite. The lever's first run without the hybrid
  # mode. Written 2026-11-28, twenty-fourth session; run in the twenty-fifth on an H200 (~4 min with the JIT cache:
  # benchmarks/calibration/opt-embed-16g-h200.json, opt-f085-16g-h200.json after collect_calibration.py):
  #   setsid nohup bash benchmarks/gpu/run_calibration.sh embed > /tmp/gpuwork/driver.log 2>&1 &
  ballast 16; VRAMKIT_DEVICE_LABEL="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0), memory emulated at 16 GB"
  point opt-embed-16g $M14 16 "--suites latency --quick $B --label opt-embed-16g --out $RES/bench/opt-embed-16g.json" \
    -- --preset optimized --kt-embed-host on
  point opt-f085-16g-b $M14 16 "--suites latency --quick $B --label opt-16g-b --out $RES/bench/opt-16g-b.json" \
    -- --preset optimized --kt-embed-host off
}

session_embed2() {  # 'embed' again on another machine, the control first (2026-11-28, twenty-fifth session): the
  # order's effect and a second machine's pools (~5 min with the JIT cache)
  ballast 16; VRAMKIT_DEVICE_LABEL="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0), memory emulated at 16 GB"
  point opt-f085-16g-h200b $M14 16 "--suites latency --quick $B --label opt-16g-h200b --out $RES/bench/opt-16g-h200b.json" \
    -- --preset optimized --kt-embed-host off
  point opt-embed-16g-h200b $M14 16 "--suites latency --quick $B --label opt-embed-16g-h200b \
    --out $RES/bench/opt-embed-16g-h200b.json" -- --preset optimized --kt-embed-host on
}

session_realload() {  # the first user's model from a checkpoint on disk (written 2026-11-29, twenty-ninth session; not
  # run yet): Qwen2.5-Coder-14B GPTQ-Int4 in its release's format (make_random_checkpoint.py --format gptq, 10.0 GB,
  # random values), the optimized preset at 16 GB read from it, then the same on dummy weights of its config, one
  # machine (~6 min with the JIT cache). Every calibration point before ran on dummy weights; the moe preset's FP8
  # checkpoint from disk reserved the same GPU memory to the MiB (benchmarks/results/gpu/moe-vs-llamacpp-q8/h200-realload/)
  #   setsid nohup bash benchmarks/gpu/run_calibration.sh realload > /tmp/gpuwork/driver.log 2>&1 &
  local ck=/tmp/ck/$M14
  [ -f $ck/model.safetensors.index.json ] || python3 tools/make_random_checkpoint.py config/models/$M14 $ck \
    --format gptq > "$RES/logs/checkpoint-14b.json" 2>&1
  step "14B GPTQ-Int4 checkpoint: $(tail -c 200 "$RES/logs/checkpoint-14b.json")"
  ballast 16; VRAMKIT_DEVICE_LABEL="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0), memory emulated at 16 GB"
  point opt-real-16g $M14 16 "--suites latency --quick $B --label opt-real-16g --out $RES/bench/opt-real-16g.json" \
    --checkpoint $ck -- --preset optimized --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --skip-tokenizer-init"
  point opt-dummy-16g $M14 16 "--suites latency --quick $B --label opt-dummy-16g --out $RES/bench/opt-dummy-16g.json" \
    -- --preset optimized
}

session_tp2() {  # two GPUs, each emulated at 16 GB; the optimized preset's knobs without the host cache
  local M7=qwen2.5-coder-7b-instruct M05=qwen2.5-0.5b-instruct
  GPUS=0,1; ballast 16; VRAMKIT_DEVICE_LABEL="2x H200, memory emulated at 16 GB each"
  { nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv; nvidia-smi topo -m; } > "$RES/logs/gpus.txt" 2>&1
  point tp2-7b-bf16-16g $M7 16 "" -- --model $M7 --preset optimized --hicache-gb 0 --tp 2
  point tp2-05b-16g $M05 16 "" -- --model $M05 --context 32768 --kv-dtype auto --mem-fraction 0.85 \
    --chunked-prefill 2048 --cuda-graph-max-bs 8 --max-running 8 --tp 2
}

# ---- issue 9's points (sessions models, rest, mla, pinned): each declared once; a session lists them in priority
# order, so if the device time runs out the first ones are the ones that matter ----
CODER=qwen3-coder-30b-a3b-instruct DS=deepseek-v2-lite-chat GQ=qwen3-30b-a3b-gptq-int4
Q2=qwen1.5-moe-a2.7b-chat-gptq-int4 F=benchmarks/gpu/shapes/qwen3-8b-folder
SMALL="--chunked-prefill 2048 --cuda-graph-max-bs 8 --max-running 8"
# an H200 (the device tool's fallback) is not in gpus.toml: give `vramkit up` its spec-sheet link figures
case "$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null)" in
  *H200*) SMALL="$SMALL --gpu-bandwidth-gbs 4800 --gpu-pcie 5x16";;
esac
at() {  # the card the next point sees: GiB left free (0: the whole card); nothing to do if already so
  [ "${at_gib:-none}" = "$1" ] && return
  at_gib=$1; ballast "$1"
  if [ "$1" = 0 ]; then VRAMKIT_DEVICE_LABEL="H100 80GB HBM3 (whole card)"
  else VRAMKIT_DEVICE_LABEL="H100 80GB HBM3, memory emulated at $1 GB"; fi
}
prewarm_start() {  # marlin JIT kernels compiled beside the other points, the GPU hidden; args: prewarm_jit.py's
  local arch; arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0)
  step "prewarm marlin JIT (sm $arch, GPU hidden, ${*:---dtype float16}) in the background"
  CUDA_VISIBLE_DEVICES= python3 benchmarks/gpu/prewarm_jit.py --arch "$arch" ${*:---dtype float16} \
    > "$RES/logs/prewarm-jit.txt" 2>&1 &
  prewarm_pid=$!
}
prewarm_wait() {
  step "waiting for the JIT prewarm"; wait "$prewarm_pid"; tail -3 "$RES/logs/prewarm-jit.txt" | tee -a "$RES/progress.txt"
}
has_cutlass() {  # MLA needs the CuTe DSL that stage_extra.sh stages (host_env.sh says why)
  python3 -c 'import cutlass, cuda.bindings.driver' > "$RES/logs/cutlass-import.txt" 2>&1 && return
  step "no CuTe DSL on this host (stage_extra.sh not run on it): MLA point skipped"; return 1
}
# MoE bf16: 128 experts x 48 layers, 57 GiB of weights (whole-card pools take 130K+ tokens: a ~32K-token probe
# still runs the largest prefill step)
p_moe_bf16_full() { at 0; point moe-bf16-full $CODER 0 "" --probe-fraction 0.25 -- --model $CODER --context 32768 \
  --kv-dtype auto --mem-fraction 0.88 $SMALL; }
# MoE block FP8 (Fp8MoEMethod, Fp8LinearMethod), a measurement shape (benchmarks/gpu/shapes/README.md)
p_moe_fp8_full() { at 0; point moe-fp8-full benchmarks/gpu/shapes/qwen3-coder-30b-a3b-fp8-shape 0 "" \
  --probe-fraction 0.12 -- --context 32768 --kv-dtype fp8_e4m3 --mem-fraction 0.6 $SMALL; }
# MLA: DeepSeek-V2-Lite's latent KV pool (576 values/token/layer)
p_mla_full() { has_cutlass || return; at 0; point mla-full $DS 0 "" --probe-fraction 0.2 -- --model $DS \
  --context 32768 --kv-dtype auto --mem-fraction 0.6 $SMALL; }
# MLA + 10 GiB offloaded: SGLang dies at the first forward (benchmarks/results/gpu/diag-mla-offload.txt)
p_mla_offload_24g() { has_cutlass || return; at 24; point mla-offload-24g $DS 24 "" --decode-tokens 16 \
  --long-output 4 --probe-fraction 0.3 -- --model $DS --context 16384 --kv-dtype auto --mem-fraction 0.85 \
  --cpu-offload-gib 10 $SMALL; }
# Gemma 2 / 3: sliding-window layers in one full pool (SGLang disables its hybrid SWA pool for them)
p_gemma2_24g() { at 24; point gemma2-24g gemma-2-9b-it 24 "" -- --model gemma-2-9b-it --context 8192 \
  --kv-dtype auto --mem-fraction 0.88 $SMALL; }
p_gemma3_16g() { at 16; point gemma3-1b-16g gemma-3-1b-it 16 "" -- --model gemma-3-1b-it --context 8192 \
  --kv-dtype auto --mem-fraction 0.85 $SMALL; }
# the issue's first model on a 24 GB card: 40 GiB of experts in pinned host RAM, copied every forward
p_moe_offload_24g() { at 24; point moe-offload-24g $CODER 24 "" --decode-tokens 8 --long-output 4 \
  --probe-fraction 0.3 -- --model $CODER --context 8192 --kv-dtype fp8_e5m2 --mem-fraction 0.85 \
  --cpu-offload-gib 40 --chunked-prefill 2048 --cuda-graph-max-bs 1 --max-running 4 \
  ${SMALL#--chunked-prefill 2048 --cuda-graph-max-bs 8 --max-running 8}; }
# a folder model (no catalog name, no HF id): Qwen3-8B's config, float32 in the file, served in 16-bit; with 0, 4
# and 8 GiB offloaded (the host RAM those pin: calibrate_point.py's MemAvailable drop and server RSS)
p_folder_16g() { at 16; point folder-qwen3-8b-16g $F 16 "" --decode-tokens 32 -- --context 8192 \
  --kv-dtype fp8_e5m2 --mem-fraction 0.85 --cpu-offload-gib 4 $SMALL; }
p_folder_24g() { at 24; point folder-qwen3-8b-24g $F 24 "" --decode-tokens 32 -- --context 8192 \
  --kv-dtype fp8_e5m2 --mem-fraction 0.85 $SMALL; }
p_folder_off8_24g() { at 24; point folder-qwen3-8b-off8-24g $F 24 "" --decode-tokens 16 -- --context 8192 \
  --kv-dtype fp8_e5m2 --mem-fraction 0.85 --cpu-offload-gib 8 $SMALL; }
# GPTQ 4-bit MoE through the marlin MoE kernels (a fresh host compiles them first: prewarm_start)
p_moe_gptq_24g() { at 24; point moe-gptq-24g $GQ 24 "" -- --model $GQ --context 32768 --kv-dtype fp8_e5m2 \
  --mem-fraction 0.85 $SMALL; }
# gpt-oss-20b's MXFP4 experts through SGLang's marlin MoE runner: the layout an RTX 50 (SM120) card gets, forced
# on the H100 (the archive has no triton_kernels, the Hopper default)
p_gptoss_marlin_24g() {
  at 24; local VRAMKIT_SGLANG_EXTRA_ARGS="$VRAMKIT_SGLANG_EXTRA_ARGS --moe-runner-backend marlin"
  export VRAMKIT_SGLANG_EXTRA_ARGS
  point gptoss-marlin-24g gpt-oss-20b 24 "" -- --model gpt-oss-20b --context 8192 --kv-dtype auto \
    --mem-fraction 0.85 $SMALL
}
p_qwen2moe_gptq_16g() { at 16; point qwen2moe-gptq-16g $Q2 16 "" -- --model $Q2 --context 8192 \
  --kv-dtype fp8_e5m2 --mem-fraction 0.85 $SMALL; }

session_models() {  # 2026-11-23: the first three ran; MLA lacked the CuTe DSL, the rest the device time
  p_moe_bf16_full; p_moe_fp8_full; p_mla_full; p_gemma2_24g; p_moe_offload_24g; p_folder_16g; p_moe_gptq_24g
  p_mla_offload_24g; at 0
}
session_rest() {  # 2026-11-24, after stage_extra.sh: what 'models' could not reach, Gemma 3 besides
  prewarm_start; p_mla_full; p_moe_offload_24g; p_folder_16g; prewarm_wait; p_moe_gptq_24g; p_mla_offload_24g
  p_gemma3_16g; at 0
}
session_mla() { p_mla_full; p_mla_offload_24g; at 0; }   # the MLA points again (a config fix between runs)
session_pinned() {  # the host RAM --cpu-offload-gb pins, and Qwen2-MoE GPTQ (shared expert + gate, marlin MoE)
  prewarm_start; p_folder_24g; p_folder_off8_24g; prewarm_wait; p_qwen2moe_gptq_16g; at 0
}

session_gptoss() {  # MXFP4 (gpt-oss) in the marlin layout; its bf16 marlin MoE kernels compile first (minutes)
  prewarm_start --dtype bfloat16 --moe-only; prewarm_wait; p_gptoss_marlin_24g; at 0
}

session_$SESSION
step DONE; pack
