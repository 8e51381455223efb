#!/usr/bin/env bash
# Poll a detached run_calibration.sh from a device call: wait until its progress says DONE or SECONDS pass,
# then print the progress and copy the packed results under $OUT (what comes back from the call).
# Usage (GPU host, repo root): bash benchmarks/gpu/wait_driver.sh 540
RES=${RES:-/tmp/gpuwork/res}; t_end=$(( $(date +%s) + ${1:-540} ))
while [ "$(date +%s)" -lt $t_end ] && ! grep -q DONE "$RES/progress.txt" 2>/dev/null; do sleep 10; done
cat "$RES/progress.txt" 2>/dev/null; tail -3 /tmp/gpuwork/driver.log 2>/dev/null
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
[ -n "${OUT:-}" ] && [ -f /tmp/gpuwork/res.tgz ] && cp /tmp/gpuwork/res.tgz "$OUT/"
