#!/usr/bin/env bash
# Issue 21 on the GPU host: the optimized preset's flags served to a coding agent, in one device call.
# The H100 is held to 16 GB (ballast.py), `vramkit up` starts SGLang natively with the preset's knobs and serving
# settings on dummy weights, with a stand-in tokenizer (benchmarks/gpu/standin_tokenizer.py) so that
# /v1/chat/completions works; agents_probe.py checks the OpenAI contract (tools, stream), the input limit and
# `vramkit client`; `vramkit bench --suites agent` measures the agent turn (cold vs warm prefix); then down.
#
# MODEL: the preset's own 14B GPTQ-Int4 compiles its marlin kernels on a fresh host for ~6.5 min (the GPU README's
# Traps), more than this device allowance; the default is the same preset's flags on Qwen2.5-0.5B's shape
# (same family, tokenizer format and parser: what is tested here is the serving contract, not the 14B's memory).
# Usage (repo root on the GPU host, .gpu/ holding the SGLang archive and ballast.py):
#   RES=$OUT bash benchmarks/gpu/run_agents.sh
# Parameters (environment; the defaults are the 0.5B run above): MODEL (the folder), NAME (the server's),
# LABEL (the bench's), TAG (the result files: agents-$TAG.json, agents-$TAG-bench.json), BALLAST;
# SKIP_UP=1 with PLAN_JSON=FILE: a server started by someone else (run_gptq_agents.sh: run_autofit.sh's auto-fit
# start of the preset's own 14B GPTQ, with --tokenizer-path $TOK) is probed and benched, and left running.
set -u
RES=${RES:?set RES to the output folder}
MODEL=${MODEL:-config/models/qwen2.5-0.5b-instruct}
NAME=${NAME:-vramkit-optimized} LABEL=${LABEL:-agents-optimized-qwen05b-16g} TAG=${TAG:-h100}
BALLAST=${BALLAST:-.gpu/ballast.py} SKIP_UP=${SKIP_UP:-0}
TOK=/tmp/standin-tokenizer
URL=http://127.0.0.1:30000
step() { echo "=== $(date +%T) $*"; }
. benchmarks/gpu/host_env.sh
export VRAMKIT_DEVICE_LABEL="H100 80GB HBM3, memory emulated at 16 GB"
if [ "$SKIP_UP" != 1 ]; then
step "ballast 16"
python3 "$BALLAST" 16 > /tmp/ballast.txt 2>&1 &
for i in $(seq 60); do grep -q holding /tmp/ballast.txt && break; sleep 1; done
cat /tmp/ballast.txt
fi
step "stand-in tokenizer"
[ -f $TOK/tokenizer.json ] || python3 benchmarks/gpu/standin_tokenizer.py "$MODEL" $TOK 2>&1 | tail -2
PLAN=${PLAN_JSON:-$RES/plan.json}
if [ "$SKIP_UP" != 1 ]; then
step "plan"
python3 -m vramkit plan --json --preset optimized --model "$MODEL" --gpu auto > "$PLAN" 2> /tmp/plan.err
tail -2 /tmp/plan.err
step "up"
timeout 420 python3 -m vramkit up --preset optimized --name "$NAME" --runtime native --model-path "$MODEL" \
  --load-format dummy --timeout 400 --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --tokenizer-path $TOK" \
  > "$RES/up.txt" 2>&1
echo "up rc=$?"; tail -5 "$RES/up.txt"
fi
step "probe"
timeout 180 python3 benchmarks/gpu/agents_probe.py --url $URL --tokenizer $TOK --out "$RES/agents-$TAG.json" \
  --plan-json "$PLAN" 2>&1 | tail -60
step "bench agent"
timeout 200 python3 -m vramkit bench --url $URL --suites agent --label "$LABEL" --no-plots \
  --out "$RES/agents-$TAG-bench.json" 2>&1 | tail -30
step "server log"
LOG=$VRAMKIT_STATE_DIR/$NAME.log
{ grep -E "server_args|Load weight|KV Cache|max_total_num_tokens|tool_call_parser|Capture|ready to roll|Input length|longer than|exceeds|ERROR|Traceback" "$LOG" | cut -c1-600 | head -80
  echo "--- last 40 lines ---"; tail -40 "$LOG" | cut -c1-400; } > "$RES/server-log-trimmed.txt" 2>&1
[ "$SKIP_UP" = 1 ] && { step "done (server left running)"; exit 0; }
step "down"
python3 -m vramkit down --name "$NAME" 2>&1 | tail -2
step "done"
