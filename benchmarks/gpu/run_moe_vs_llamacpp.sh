#!/usr/bin/env bash
# Issue 18 items 1, 2 and 6 on the GPU host, one driver, every step back to back: the kit's hybrid MoE
# (`vramkit up --runtime native --preset moe`, AMXINT4 CPU experts through kt-kernel 0.5.1 + the adapter)
# beside llama.cpp (built here from source, CUDA, sm_90 only) on the same random-weight Qwen3-Coder-30B-A3B
# shape, the card emulated at 16 and 24 GiB by the same ballast; then the kit's levers at 16 GiB.
# Detached; poll with `bash benchmarks/gpu/run_moe_vs_llamacpp.sh wait SECONDS` (packs $RES into $OUT).
#
# Staging (here, before the device call), in .stage-moe/ (git-ignored, carried with .gpu):
#   llama-src.tar.xz    llama.cpp's source as the llama-cpp-python 0.3.36 sdist vendors it (`pip download
#                       --no-deps --no-binary :all: llama-cpp-python==0.3.36`), trimmed to what the CUDA build
#                       of llama-bench and llama-server reads (no models/, docs/, tests/, other backends): 4.4 MB
#   kt/*.whl            kt-kernel 0.5.1 cp312 (config/versions.toml's pin); whl/gguf-*.whl (gguf 0.19.0)
#   ballast.py          ../shared/gpu/ballast.py
#   overlay/            this branch's changed files, copied over the sent tree first (the device call sends
#                       /work/main's tree, not the branch)
# The .stage-w16 every later step names, from nothing (~1 min here; 8.9 MB): bash benchmarks/gpu/stage_kt_avx2.sh
# .stage-w16 && bash benchmarks/gpu/stage_llama_src.sh .stage-w16 (kt/ with the 0.5.1 amx and 0.7.0 avx2 wheels,
# whl/gguf, ballast.py, llama-src.tar.xz); without .gpu/tvm-ffi-cache.tar.* setup compiles the marlin kernels there.
# Usage (repo root, GPU host):
#   setsid nohup bash benchmarks/gpu/run_moe_vs_llamacpp.sh all > /tmp/mvl/driver.log 2>&1 &
#   bash benchmarks/gpu/run_moe_vs_llamacpp.sh wait 540 [STEP-NAME: return early once that step begins]
#   (wait exits 3 at once where no run is on the machine: the earlier machine was given back or lost, and the call
#   found a fresh one; start the driver again rather than wait out SECONDS on nothing)
# The int4 CPU decode (--kt-cpu-decode int4) beside the preset without it and llama.cpp's pair, its kernel alone first
# (~13 min with the builds; ran 2026-11-29, moe-vs-llamacpp-int4/r1/; then REPEAT=3 INT4_BENCH=0 on the same machine,
# r3/): DUMMY_BY_NAME=1 STAGE=.stage-l STEPS="setup lint4" (.stage-l: .stage-w16 without its 0.7.0 wheel, 7.1 MB)
# Again with the kernel's fixes and its AVX2 build forced in a server, REPEAT=3 on a fresh machine (2026-11-29,
# thirty-first session, ~15 min: r4/), then STEPS="setup realload-gptq" REALS=real and REALS=dummy there (realload/)
# On a second machine with llama.cpp swept there and both engines' thread counts (2026-11-29, thirty-second session:
# r5/): DUMMY_BY_NAME=1 REPEAT=3 INT4_KT=0 INT4_AVX2=0 INT4_SWEEP=1 INT4_THREADS="14 16 6:1" LLAMA_T16=1 LB_THREADS=14
# LB_D30K=0 STAGE=.stage-l STEPS="setup lint4"
# On a third, both engines' AVX2 builds beside their own (2026-11-29, thirty-third session, ~24 min held: the marlin JIT
# cache left out of .gpu to keep the carry under 64 MiB, so setup compiled it there, ~10 min beside the llama.cpp
# build: r6/): LLAMA_CPU_VARIANTS=1 DUMMY_BY_NAME=1 REPEAT=3 INT4_KT=0 INT4_BENCH=0 STAGE=.stage-l STEPS="setup int4isa
# lint4"; then on the same machine (r6-prof/, ~4 min) REPEAT=1 STEPS="setup profile4"
# On a fourth, the kernel as it now is A/B'd against r6/'s and its masked AVX-512 build as a server point (2026-11-29,
# thirty-fourth session, ~23 min held, the marlin JIT compiled there again: r7/): DUMMY_BY_NAME=1 REPEAT=3 INT4_KT=0
# INT4_AVX2=0 INT4_MASKED=1 STAGE=.stage-l STEPS="setup int4ab int4isa lint4"; then on the same machine (r7-prof/,
# ~4 min) REPEAT=1 STEPS="setup profile4"
# On a fifth, the decode share (part of each CPU layer's experts on the GPU over the bus) beside the preset (2026-11-29,
# thirty-fifth session, ~16 min: r8/; the gshare step failed there on an import order, since fixed, so the share point
# took the fallback 0.4 with the copies registered; the bench ran on the same machine in a call of its own):
# DUMMY_BY_NAME=1 REPEAT=3 INT4_KT=0 INT4_AVX2=0 INT4_BENCH=0 INT4_SHARE=auto STAGE=.stage-l STEPS="setup gshare lint4"
# Steps of `all` (each skipped when LEVELS/STEPS leaves it out; results land in $RES as they come):
#   setup     SGLang archive, kt-kernel, gguf; llama.cpp build (in the background, through the kit's first
#             start); KT's AMXINT4 layout and the Q4_K_M GGUF, both random, both the exact shape
#   kit-16    the kit at 16 GiB as the preset plans it (43 GPU experts per layer, 14 KT threads), full probe
#   llama-16  llama-server --fit, llama-server --n-cpu-moe swept down to the lowest that starts, full probe at
#             the best; llama-bench pp512 / tg128 at depth 0, 8K, 30K with that --n-cpu-moe
#   kit-24, llama-24   the same at 24 GiB
#   amxint8   at 16 GiB: the preset with --kt-method AMXINT8 (KT's INT8 layout, random, written here), full probe
#   amxint8-levers  the same + whole layers on the GPU + --kt-max-deferred-experts-per-token 2, full probe
#   levers    at 16 GiB: whole layers on the GPU (VRAMKIT_KT_GPU_LAYERS=auto, the adapter), deferred experts 2,
#             both, chunked prefill 8192 (TTFT only), deferred experts 1 (KT threads 16 was on this list on 2026-11-24,
#             disturbed by another command; measured since and refused by the plan: moe-vs-llamacpp-q8/k16-int8-t16)
# Run 2026-11-24 (benchmarks/results/gpu/moe-vs-llamacpp*): every step up to deferred experts 2 ran clean
# (1,530 s); the steps after it overlapped another helper's device command on the same machine (the report
# flags them from SGLang's free memory at load) and 'both' was not in the list yet.
# Only the levers, on a fresh machine: STEPS="levers" (setup always runs; it skips what /tmp already has).
# The AMXINT8 candidate (the moe preset's default decision, FP8 vs AMXINT8): STEPS="setup amxint8 amxint8-levers"
# The estimate's held-out thread/card points: STAGE=.stage-thr STEPS="setup threads" (AMXINT8 and AMXINT4 at 6 and
# 14 KT threads, 16 and 24 GiB, a fresh host-bandwidth sweep at those thread counts; staging: kt/ and ballast.py).
# AMXINT8 on the AVX-512 build (issue 18 item 4): STAGE=.stage-thr STEPS="setup avx512".
# The int4 GPU-experts lever beside llama.cpp, one host session: STAGE=.stage-thr STEPS="setup llama-16 llama-24
# gptq" (staging: kt/, whl/gguf, ballast.py and llama-src.tar.xz from benchmarks/gpu/stage_llama_src.sh); the marlin
# JIT kernels and llama.cpp compile side by side first, every point after both (2026-11-27, moe-vs-llamacpp-gptq/).
# Also there: gptq-n (N experts per layer: refused now), gptq-bf16 and diag-fp16 (run2/), and gptq24, the 24 GiB
# points alone with the JIT cache carried in .gpu/tvm-ffi-cache.tar.gz (host_env.sh): STAGE=.stage-24 (ballast.py).
# LLAMAFILE_Q8_0 on the avx2 build forced and on the amx build (issue 18 item 4): STAGE=.stage-thr
# STEPS="setup llamafile llamafile24" (staging: kt/, whl/gguf-0.19.0, ballast.py).
# moe_wna16, the GPTQ split (2026-11-27, second session; moe-vs-llamacpp-wna16/): STAGE=.stage-w16 STEPS="setup llama-16
# llama-24 wna16", one machine, 1,073 s: staging as .stage-thr but kt/ holds the wheel with only its amx extension (1.6 MB: the
# 64 MiB carry), and .gpu/tvm-ffi-cache.tar.xz the marlin JIT cache.
# llama.cpp's CPU kernels inside the server (the adapter's VRAMKIT_KT_GGML; 2026-11-27, fourteenth session, run2 of
# moe-vs-llamacpp-ggml/): STAGE=.stage-gg STEPS="setup lggml" (staging: .stage-w16 without its 0.7.0 wheel:
# mkdir -p .stage-gg/kt .stage-gg/whl && ln .stage-w16/kt/kt_kernel-0.5.1-*.whl .stage-gg/kt/ && ln .stage-w16/whl/*
# .stage-gg/whl/ && ln .stage-w16/ballast.py .stage-w16/llama-src.tar.xz .stage-gg/; and .gpu/tvm-ffi-cache.tar.xz, the
# tvm-ffi-cache.tar.gz a gptq step leaves in $OUT recompressed with xz, 6.3 MB: the device counts the tree in its 64 MiB
# carry and the gz did not fit); ~20 min held. More whole layers on
# the GPU at 16 GiB (mem_fraction 0.93, 0.95 with 2048-token chunks; ran 2026-11-28, moe-vs-llamacpp-mf/run1, ~16 min):
# STAGE=.stage-gg STEPS="setup lmf". The moe preset as it comes (0.93 since) beside llama.cpp, seeded weights:
# DUMMY_BY_NAME=1 STAGE=.stage-gg STEPS="setup lpreset" (~12 min; ran 2026-11-28, moe-vs-llamacpp-preset/). The two costs
# of a CPU layer's prompt chunk on the GPU, the adapter's own path checked and timed without a server
# (gpu_prefill_bench.py): STAGE=.stage-gg STEPS="setup gprefill" (~3 min); then the server with it beside the preset
# without it: DUMMY_BY_NAME=1 STAGE=.stage-gg STEPS="setup gprefill kprefill" (~12 min; ran 2026-11-28,
# moe-gpu-prefill/run2), and with llama.cpp's pair: STEPS="setup lprefill" (~12 min with the build; ran 2026-11-28,
# seventeenth session, three times on one machine, $RES moved aside between runs (~5 min each after the first), merged
# by `moe_vs_llamacpp_report.py merge` into moe-gpu-prefill/run3: the main 16 GiB table). The same bench for block-FP8
# experts (the moe preset's checkpoint, SGLang's triton MoE): STAGE=.stage-gg STEPS="setup gprefill8" (~1.5 min; ran
# 2026-11-28, seventeenth session, moe-gpu-prefill/fp8-bench/a and b, their numeric check void; eighteenth session,
# fp8-bench/c, checked). The FP8 preset with the path in a server after the adapter's staging fix: STEPS="setup
# fp8stage" (~7 min; ran 2026-11-28, eighteenth session, moe-gpu-prefill/fp8-server/).
# kt-kernel 0.7.0's clean avx2 build, LLAMAFILE_Q8_0 at 16 GiB: STAGE=.stage-070 STEPS="setup avx2-070" (staging:
# benchmarks/gpu/stage_kt_avx2.sh .stage-070; ~5 min: the Q8_0 GGUF written there, one start, one probe); run 2026-11-27
# after llama-q8 in the same session (moe-vs-llamacpp-q8/k16-q8-avx2-070, kt070-avx2-bench.json).
# Medians of three (written 2026-11-27, third session; not run yet: no device time since): STAGE=.stage-w16 REPEAT=3 LB_THREADS=14 LB_D30K=0
# STEPS="setup med3": every probe figure of both engines the median of 3 rounds (moe_probe.py --repeat), llama.cpp's
# sweep started at the best the earlier sessions found, llama-bench at 14 threads without the 30K depth (time);
# the GPTQ split on moe_wna16 as planned and with whole layers on the GPU, each engine at 16 then 24 GiB.
# The peer at the kit's accuracy class (2026-11-27, fifth session, with avx2-070: 1,275 s, moe-vs-llamacpp-q8/):
# STAGE=.stage-w16 LB_D30K=0 STEPS="setup llama-q8 avx2-070": llama.cpp reading a Q8_0
# GGUF, --fit and the --n-cpu-moe sweep at 16 GiB, beside the kit's FP8 + AMXINT8 points in the same session (staging
# as for med3: kt/ with the 0.5.1 amx wheel, llama-src.tar.xz, whl/gguf, ballast.py); report: moe-vs-llamacpp-q8-16g.
# Medians of that comparison: STAGE=.stage-w16 REPEAT=3 Q8_LAYERS=0 Q8_NCMOE=28 LB_D30K=0 STEPS="setup llama-q8" (~25 min).
# The thread term at kernel level (AMXINT8, AMXINT4, FP8 at 6/10/14 threads, ~3 min): STAGE=.stage-w16 STEPS="setup kthreads".
# Transparent huge pages, the preset at 16 GiB as the host has them and with "always" (~10 min): STAGE=.stage-w16 STEPS="setup thp".
# The per-token budgets measured (SGLang's profiler on the kit's best 16 GiB point and its whole-layer twin, llama.cpp
# beside them and its --n-cpu-moe sweep, kernel-level CPU-expert time; ~20 min): STAGE=.stage-w16 STEPS="setup profile"
# SGLang's batch levers at 24 GiB (torch.compile, continuous decode steps) beside llama.cpp: STAGE=.stage-w16 STEPS="setup k24lev"
# KT threads below physical cores - 2 on the kit's best 16 GiB point (kt-kernel pins worker i to core i and its workers
# spin between layers, so SGLang's scheduler, its CUDA host nodes and the tokenizer share what is left; the kernel-level
# AMXINT8 time stops improving at 10 threads): STAGE=.stage-w16 REPEAT=3 STEPS="setup kcores" (KCORES: the counts).
# Whether the whole-layer GPTQ stall is that oversubscription too: STAGE=.stage-w16 STEPS="setup layers-t10" (~5 min;
# ran 2026-11-27, ninth session: moe-budget/layers-t10, 0.76 ms a CPU layer against 7.7 at 14 threads; its 4-stream
# profile segfaulted in the profiler, so LT10_PROBE="--new-tokens 128 --streams 1,4 --ttft 512,8192 --ttft-new-tokens
# 64 --repeat 1" ran it unprofiled on the next machine).
# SGLang's dummy weights repeat across layers (one seed for every parameter: every layer's router is the same, and
# each layer's recorded routing correlates 0.98 with layer 0's, moe-budget/hot/expert-counts.json), so a token goes to
# nearly the same experts in all 48 layers. DUMMY_BY_NAME=1 seeds each parameter by its name (the kt_compat adapter's
# VRAMKIT_DUMMY_SEED_BY_NAME) on every kit point of the run. Its check (~10 min):
# DUMMY_BY_NAME=1 STAGE=.stage-w16 REPEAT=3 STEPS="setup seedcheck". On by default since 2026-11-28's twenty-second
# session (a point run without it by oversight, moe-vs-llamacpp-q8/h200-fp8cpu-b/, left SGLang's one router);
# DUMMY_BY_NAME=0 gives SGLang's own dummy load back.
# The idle memory at mem_fraction 0.85 given to experts (0.90 against 0.85, one machine; ~7 min):
# STAGE=.stage-w16 REPEAT=3 STEPS="setup mf90".
# llama.cpp's best 16 GiB server alone, beside a run's kit points (~4 min): STEPS="... lbest16".
# Whether the server needs torch's compile-worker pool (written 2026-11-27, thirteenth session; not run yet): the preset
# with TORCHINDUCTOR_COMPILE_THREADS=1 and without: DUMMY_BY_NAME=1 STAGE=.stage-w16 REPEAT=3 STEPS="setup ctpool".
# Whole layers against the split at the same threads, one machine, 3 rounds, 10 and 12 threads (~13 min):
# STAGE=.stage-w16 REPEAT=3 STEPS="setup layers-pair" (LP_THREADS: the counts).
# Ran 2026-11-27, tenth session, every kit point with DUMMY_BY_NAME=1 (moe-budget/seed, seed-mf90, seed-layers):
# STEPS="setup seedcheck mf90 lbest16", then "setup mf90 layers-pair" LP_THREADS=10 on the same machine (its first
# call's mf90 and layers points ran without the ballast: every call must carry the staging folder), then
# "setup layers-pair" LP_THREADS="10 12" on a second. Not run yet with it: hot, hotctl, and whole layers on the FP8
# checkpoint (the preset's default model; ~7 min): DUMMY_BY_NAME=1 STAGE=.stage-w16 REPEAT=3 STEPS="setup fp8-layers".
# Ran 2026-11-27, eleventh session, on one machine with best16 (the main table's 16 GiB row: the kit's best beside
# llama.cpp's --fit and --n-cpu-moe 11) and then ldefer: moe-budget/best16; the moe preset places whole layers since.
# The placement lever (vramkit kt-placement; ran 2026-11-27, ninth session: moe-budget/hot): SGLang's
# expert-distribution recorder on prompts kept apart from the probe's (--seed-offset), each layer's most-routed experts
# put in the GPU's slots (--kt-placement: SGLang's --init-expert-location), then the probe's own prompts with the
# trivial map and with that one, and the recorded prompts again with it and (step triv-rec, part of hot) with the
# trivial map and no recorder: STAGE=.stage-w16 REPEAT=3 STEPS="setup hot" (~21 min). The placed servers run with the
# kt_compat adapter's dispatch (on under a placement):
# SGLang 0.5.15.post1's Qwen3-MoE maps the router's ids only for DeepEP / TBO.
# The placement's control (not run yet): each layer's experts reversed within the GPU's 88 and within the CPU's 40, so
# every token keeps its split and only the mapping's cost remains: STAGE=.stage-w16 REPEAT=3 STEPS="setup hotctl" (~9 min).
# Random dummy weights cannot show that the outputs stay the same; a checkpoint on disk can, and that check came
# before any speed (ran 2026-11-27, eighth session: moe-budget/hotcheck): STAGE=.stage-w16 STEPS="setup hotcheck"
# (~8 min), then STEPS="hcref" on the same machine (~1.5 min: the rounding reference): a random 4-layer FP8 checkpoint of
# the coder's shape written to disk, its CPU experts read from it (--kt-method FP8: the same values on both sides),
# 64 GPU experts a layer, each layer's experts reversed by the placement; greedy decodes with log-probabilities of
# the trivial map, the placement with the adapter's dispatch, the trivial map with the dispatch on (it must change
# nothing) and the placement without it (SGLang as pinned: expected to change the tokens); placement_check.py
# compares them.
# STAGE=.stage-moelev: setup then writes only KT's AMXINT8 layout (random experts; the GPU experts are the FP8
# config's dummy weights, as every point here) and builds no llama.cpp; staging needs kt/ and ballast.py only.
set -u
SESSION=${1:?usage: run_moe_vs_llamacpp.sh all|wait SECONDS}
W=/tmp/mvl; RES=$W/res; mkdir -p "$RES/logs"
step() { echo "=== $(date +%T) $*" | tee -a "$RES/progress.txt"; }
pack() {  # trimmed evidence beside each point, then every small result (no raw server logs) into one archive
  python3 benchmarks/gpu/moe_vs_llamacpp_report.py evidence "$RES" > /dev/null 2>&1
  local f  # a server that did not start: its log's last lines (the traceback), since raw logs stay behind
  for f in "$RES"/*.server.log; do
    [ -f "$f" ] && grep -q '"up_rc": [1-9]' "${f%.server.log}.json" 2>/dev/null && tail -120 "$f" > "${f%.server.log}.fail.txt"
  done
  (cd "$RES" && tar -czf "$W/res.tgz" --exclude='*.server.log' --exclude='*.llama.log' .)
}

if [ "$SESSION" = wait ]; then
  t_end=$(( $(date +%s) + ${2:-540} ))
  stop=${3:-DONE}   # also return once a progress line names this (e.g. the next step's name: decide whether to go on)
  # a machine with no run on it is a fresh one (the earlier was given back or lost): say so now, not after SECONDS
  [ -f "$RES/progress.txt" ] || pgrep -f "run_moe_vs_llamacpp.sh all" > /dev/null \
    || { echo "no run on this machine: a fresh one (the earlier machine is gone); start again"; exit 3; }
  while [ "$(date +%s)" -lt "$t_end" ] && ! grep -qE "^=== .* (DONE|$stop)" "$RES/progress.txt" 2>/dev/null; do sleep 5; done
  pack; cat "$RES/progress.txt" 2>/dev/null | tail -60; tail -3 $W/driver.log 2>/dev/null
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
  [ -n "${OUT:-}" ] && cp "$W/res.tgz" "$OUT/"
  # SGLang's decode traces (the profile step), newest first while they fit what comes back beside res.tgz
  if [ -n "${OUT:-}" ]; then
    left=40000000
    for f in $(ls -t $W/prof/*DECODE*.trace.json.gz 2>/dev/null | head -4); do
      sz=$(stat -c %s "$f"); [ "$sz" -lt "$left" ] && [ "$sz" -lt 15000000 ] && cp "$f" "$OUT/" && left=$((left - sz))
    done
  fi
  # the compiled marlin kernels, for a later host (host_env.sh's JIT_CACHE), when they come back small enough
  [ -n "${OUT:-}" ] && [ -f $W/tvm-ffi-cache.tar.gz ] && ! ls .gpu/tvm-ffi-cache.tar.* > /dev/null 2>&1 && [ "$(stat -c %s $W/tvm-ffi-cache.tar.gz)" -lt 40000000 ] \
    && cp $W/tvm-ffi-cache.tar.gz "$OUT/"
  exit 0
fi

t_start=$(date +%s); elapsed() { echo $(( $(date +%s) - t_start )); }
S=${STAGE:-.stage-moe}
[ -d $S/overlay ] && cp -r $S/overlay/. .
STEPS=${STEPS:-setup kit-16 llama-16 kit-24 llama-24 levers}
listed() { case " $2 " in *" $1 "*) return 0;; esac; return 1; }   # WORD LIST: LIST (words) names WORD
has() { listed "$1" "$STEPS"; }
CK=/tmp/ck; FP8=$CK/fp8cfg; KT=$CK/kt-int4; KT8=$CK/kt-int8; GGUF=$CK/qwen3-coder-30b-a3b-q4_k_m-random.gguf
MODEL_CFG=config/models/qwen3-coder-30b-a3b-instruct
LL=$W/llama.cpp; BIN=$LL/build/bin; BUILT=$W/llama-built
# THREADS: llama.cpp's -t and the KT layout writer's; the kit's own KT threads are its plan's (since 2026-11-27's seventh
# session a quarter of the cores left to SGLang: 12 of 16; every earlier point ran 14)
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null)
PHYS=$(lscpu -p=core,socket | grep -v '^#' | sort -u | wc -l); THREADS=$((PHYS - 2))

step "setup ($PHYS physical cores, llama.cpp threads $THREADS)"
{ lscpu; free -g; df -h /tmp /dev/shm; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  echo "nsys: $(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null || echo none)"; } \
  > "$RES/host.txt" 2>&1
# llama.cpp: configured and built in the background (it shares the CPU with the kit's first start; the kit's
# first probe waits for $BUILT)
command -v nvcc > /dev/null || export PATH=/usr/local/cuda/bin:$PATH
# the steps that need each part of the setup (has_any: any of them in STEPS)
has_any() { local s; for s in "$@"; do has "$s" && return 0; done; return 1; }
LLAMA_STEPS="lint4 profile4 lint4ab llama-16 lbest16 best16 lmarlin lggml lmf lpreset lprefill raw4 kbench llama-24 med3 med16 k24lev
  llama-q8 lprefill8 lint8 med8 pair8 lt16 profile"
INT4_STEPS="kit-16 kit-24 levers threads gptq-n"
INT8_STEPS="lint4 profile4 lint4ab kint4 embhost4 stagesnap poolcheck realload-gptq amxint8 amxint8-levers threads threads24 gptq gptq-bf16 diag-fp16 wna16 again gensweep med3 llama-q8 thp
  profile med16 kcores hot triv-rec hotctl layers-t10 layers-pair seedcheck mf90 fp8-layers best16 ldefer lmarlin
  lggml lmf lpreset lprefill kprefill kprefill8 lprefill8 lint8 med8 pair8 fp8cpu fp8stage fp8pin fp8int8 kmarlin
  raw4 kraw4 ctpool embhost"
GPTQ_STEPS="gshare lint4 profile4 lint4ab kint4 embhost4 stagesnap poolcheck realload-gptq gptq gptq-n gptq-bf16 gptq24 wna16 again gensweep med3 med16 profile k24lev kcores hot triv-rec hotctl
  layers-t10 layers-pair seedcheck mf90 best16 ldefer lmarlin lggml lmf lpreset lprefill kprefill gprefill kmarlin
  raw4 kraw4"
Q4_GGUF_STEPS="lint4 profile4 lint4ab llama-16 lbest16 best16 lmarlin lggml lmf lpreset lprefill raw4 llama-24 med3 med16 profile k24lev"
need_llama=; has_any $LLAMA_STEPS && need_llama=1
has_any embhost embhost4 && [ "${EMBHOST_LLAMA:-0}" = 1 ] && need_llama=1     # their llama.cpp pair only when asked
need_int4=; has_any $INT4_STEPS && need_int4=1
{ has avx2-070; } && { [ -n "$(ls $S/kt/kt_kernel-0.7.0-*.whl 2>/dev/null)" ] || echo "avx2-070: no 0.7.0 wheel in $S/kt"; }
need_int8=; has_any $INT8_STEPS && need_int8=1
need_gptq=; has_any $GPTQ_STEPS && need_gptq=1
GDTYPE=float16; has gptq-bf16 && GDTYPE=bfloat16   # the activations' dtype the marlin kernels are compiled for
[ -n "$need_llama" ] || { mkdir -p $W; echo "build skipped (no llama step)" > $W/build-rc.txt; }
. benchmarks/gpu/host_env.sh     # SGLang archive into /tmp/site, PYTHONPATH, the archive's extra flags
# this machine's own host-read sweep first (~10 s, nothing else running yet: the build starts after it), so a machine
# lost later in the session still leaves its sweep (2026-11-28, twenty-first session: one was lost mid-run)
has threads || has threads24 || python3 -c "import json; from vramkit.adapters import membw
print(json.dumps(membw.sweep([1, 2, 4, 6, 8, 12, $THREADS, $PHYS], 4 << 30)))" > "$RES/membw-session.json" \
  2> "$RES/logs/membw-session.err"
step "host read sweep: $(python3 -c "import json; print(', '.join(f\"{r['threads']}t {r['bytes_per_s'] / 1e9:.0f}\" for r in json.load(open('$RES/membw-session.json'))))" 2>&1 | tail -c 300) GB/s"
# the same machine's sweep again, 3 rounds taken in turn (each count's best), unpinned and with the threads bound one
# to a core as kt-kernel binds its pool (membw.sweep_pinned; ~15 s both): the one-round sweeps of the H200 machines
# were not monotone in the thread count (2026-11-28). Data for the next fit, not read by the estimate
python3 -c "import json; from vramkit.adapters import membw
c = [4, 8, 12, $THREADS, $PHYS]
print(json.dumps({'rounds': membw.sweep(c, 4 << 30, rounds=3), 'pinned': membw.sweep_pinned(c, 4 << 30, rounds=3)}))" \
  > "$RES/membw-session-r3.json" 2> "$RES/logs/membw-session-r3.err"
step "host read, 3 rounds / pinned: $(python3 -c "import json; d = json.load(open('$RES/membw-session-r3.json'))
print(', '.join(f\"{a['threads']}t {a['bytes_per_s'] / 1e9:.0f}/{b['bytes_per_s'] / 1e9:.0f}\" for a, b in zip(d['rounds'], d['pinned'])))" 2>&1 | tail -c 300) GB/s"
# LLAMA_CPU_VARIANTS=1 (written 2026-11-29, thirty-second session; ran in the thirty-third, r6/): the CPU backend as
# loadable variants, haswell (AVX2) and sapphirerapids (this host's), one CUDA build for both: build/bin loads the
# best (sapphirerapids here), build/bin-avx2 holds haswell alone, what an AVX2-only desktop's llama.cpp runs
# (benchmarks/gpu/llama_cpu_variants.py; the two folders checked on the dev machine with a CPU-only build of haswell
# and zen4: each llama-bench loaded its folder's libggml-cpu-*.so); else one static build for this CPU
# (-march=native), as every run before
LLAMA_CPU="-DGGML_NATIVE=ON"; LLAMA_VARIANT_TARGETS=
if [ "${LLAMA_CPU_VARIANTS:-0}" = 1 ]; then
  LLAMA_CPU="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DBUILD_SHARED_LIBS=ON -DGGML_CPU_ALL_VARIANTS=ON"
  LLAMA_VARIANT_TARGETS="ggml-cuda ggml-cpu-haswell ggml-cpu-sapphirerapids"
fi
BIN_AVX2=$LL/build/bin-avx2
REPO=$PWD
[ -n "$need_llama" ] && echo "${LLAMA_CPU//-D/}${LLAMA_VARIANT_TARGETS:+ (variants haswell, sapphirerapids; bin-avx2: haswell alone)}" \
  > "$RES/llama-build.txt"
[ -n "$need_llama" ] && (
  mkdir -p $W && tar -xJf $S/llama-src.tar.xz -C $W && cd $LL && \
  { [ -z "$LLAMA_VARIANT_TARGETS" ] || python3 "$REPO/benchmarks/gpu/llama_cpu_variants.py" . haswell sapphirerapids; } \
    > $W/variants.log 2>&1 && \
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    $LLAMA_CPU -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF > $W/cmake.log 2>&1 && \
  ninja -C build llama-bench llama-server $LLAMA_VARIANT_TARGETS > $W/ninja.log 2>&1 && \
  { [ -z "$LLAMA_VARIANT_TARGETS" ] || { rm -rf build/bin-avx2 && cp -a build/bin build/bin-avx2 && \
      rm -f build/bin-avx2/libggml-cpu-sapphirerapids.so; }; } && touch $BUILT
  echo "build rc=$? after $(( $(date +%s) - t_start )) s" > $W/build-rc.txt
) &
build_pid=$!
if [ -n "$need_gptq" ]; then  # the marlin JIT kernels (GPTQ attention + MoE), compiled beside the setup, GPU hidden
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0)
  for mod in gptq_marlin_repack gptq_marlin moe_wna16_marlin; do   # one nvcc each: side by side
    ( CUDA_VISIBLE_DEVICES= python3 benchmarks/gpu/prewarm_jit.py --arch "$arch" --dtype "$GDTYPE" --only $mod \
        > "$RES/logs/prewarm-$mod.txt" 2>&1
      echo "$mod: rc=$? after $(( $(date +%s) - t_start )) s" >> "$RES/logs/prewarm-jit.txt" ) &
    prewarm_pids="${prewarm_pids:-} $!"
  done
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/kt/kt_kernel-0.5.1-*.whl \
  $(ls $S/whl/gguf-*.whl 2>/dev/null) > "$RES/logs/site.txt" 2>&1
export PYTHONPATH=$PYTHONPATH:$PWD/services/sglang-kt/kt_compat
python3 -c "import kt_kernel; print('kt_kernel', kt_kernel.__version__, kt_kernel.__cpu_variant__)" \
  >> "$RES/logs/site.txt" 2>&1
step "site: $(tail -1 "$RES/logs/site.txt") ($(elapsed) s)"
mkdir -p $FP8 && python3 -c "
import json; from vramkit.core.model import checkpoint as cl
c = json.load(open('$MODEL_CFG/config.json')); c['quantization_config'] = cl.quantization_config('fp8')
c['torch_dtype'] = 'bfloat16'; json.dump(c, open('$FP8/config.json', 'w'), indent=2)"
[ -n "$need_int4" ] && { [ -d $KT/_layer_47 ] || python3 tools/make_random_checkpoint.py $MODEL_CFG $KT --kt-layout AMXINT4 \
  --kt-threads "$THREADS" > "$RES/kt-int4.json" 2> "$RES/logs/kt-int4.err"
  step "KT AMXINT4 layout: $(tail -1 "$RES/kt-int4.json") ($(elapsed) s)"; }
[ -n "$need_int8" ] && { [ -d $KT8/_layer_47 ] || python3 tools/make_random_checkpoint.py $MODEL_CFG $KT8 \
  --kt-layout AMXINT8 --kt-threads "$THREADS" > "$RES/kt-int8.json" 2> "$RES/logs/kt-int8.err"
  step "KT AMXINT8 layout: $(tail -1 "$RES/kt-int8.json") ($(elapsed) s)"; }
# the Q4_K_M GGUF (17 GB) only for the steps that run it: llama-q8 alone needs the disk for its 32.5 GB Q8_0 file
{ has_any $Q4_GGUF_STEPS || { has embhost4 && [ "${EMBHOST_LLAMA:-0}" = 1 ]; }; } && { [ -f $GGUF ] || python3 tools/make_random_gguf.py $MODEL_CFG $GGUF > "$RES/gguf.json" 2> "$RES/logs/gguf.err"
  step "GGUF: $(cat "$RES/gguf.json") ($(elapsed) s)"; }
# the int4 GPU-experts lever: the same shape with Qwen's GPTQ-Int4 quantization_config (group 128, sym, attention
# and experts 4-bit; config/models/qwen3-30b-a3b-gptq-int4, whose MoE shape is this one), dummy weights
# every step's kit points start from the split (--kt-gpu-layers off; the moe preset places whole layers since
# 2026-11-27, eleventh session): a whole-layer point adds --env VRAMKIT_KT_GPU_LAYERS=auto or --kt-gpu-layers auto
GQ=$CK/gptqcfg; KITG="--preset moe --kt-gpu-layers off --model-path $GQ --load-format dummy"
[ -n "$need_gptq" ] && mkdir -p $GQ && python3 -c "
import json, sys; sys.path.insert(0, 'benchmarks/gpu'); from fit_kt import gptq_coder_config
json.dump(gptq_coder_config(), open('$GQ/config.json', 'w'), indent=2)"
cp benchmarks/results/gpu/anchor/membw.json "$RES/membw-anchor.json"
MEMBW=$RES/membw-anchor.json
if has threads || has threads24; then  # this session's own sweep, at every thread count the points below run (6 and 14 among them)
  python3 -c "import json; from vramkit.adapters import membw
print(json.dumps(membw.sweep([1, 2, 4, 6, 8, 12, $THREADS, $PHYS], 4 << 30)))" > "$RES/membw.json" 2> "$RES/logs/membw.err" \
    && MEMBW=$RES/membw.json
  step "membw: $(cat "$RES/membw.json" | head -c 400)"
fi
export VRAMKIT_HOST_READ_GBS=$(python3 -c "import json; print(','.join(f\"{r['threads']}:{r['bytes_per_s'] / 1e9:.1f}\" \
  for r in json.load(open('$MEMBW'))))")
pack

ballast_pid=
ballast_off() {  # the whole card again (llama-bench's sweep, the kernel-level benches, the end)
  [ -n "$ballast_pid" ] && { kill $ballast_pid 2>/dev/null; wait $ballast_pid 2>/dev/null; ballast_pid=; }
  return 0
}
ballast() {
  ballast_off
  python3 $S/ballast.py "$1" > "$RES/logs/ballast-$1.txt" 2>&1 & ballast_pid=$!
  for i in $(seq 60); do grep -q holding "$RES/logs/ballast-$1.txt" && return 0; sleep 1; done
  # no ballast, no emulated card: every point after would plan for the whole card (2026-11-27, tenth session: a call
  # without carry took the staged ballast.py away mid-run, and three points ran on 80 GB), so the run stops here
  step "ballast $1 GiB not holding: $(tail -1 "$RES/logs/ballast-$1.txt")"; pack; step "DONE, stopped: no ballast"
  exit 1
}
export VRAMKIT_STATE_DIR=/tmp/vk-state
Q8=$CK/qwen3-coder-30b-a3b-q8_0-random.gguf
q8_gguf() {  # the experts as a random Q8_0 GGUF of the exact shape (LLAMAFILE_Q8_0's --kt-weight-path), written once
  [ -f $Q8 ] || python3 tools/make_random_gguf.py $MODEL_CFG $Q8 --type Q8_0 > "$RES/gguf-q8_0.json" 2> "$RES/logs/gguf-q8_0.err"
}
q8_for_llama() {  # llama.cpp's Q8_0 side after the kit's: KT's AMXINT8 layout goes first (the disk holds one of them)
  rm -rf $KT8
  q8_gguf
  step "GGUF Q8_0: $(head -c 300 "$RES/gguf-q8_0.json" 2>/dev/null) ($(elapsed) s)"
}
KIT="--preset moe --kt-gpu-layers off --model-path $FP8 --load-format dummy --kt-method AMXINT4 --kt-weight-path $KT"
KIT8="--preset moe --kt-gpu-layers off --model-path $FP8 --load-format dummy --kt-method AMXINT8 --kt-weight-path $KT8"
# the moe preset as it comes on its own FP8 config (whole layers, AMXINT8, the prompt path by auto): the FP8 path's steps
KITF8="--preset moe --model-path $FP8 --load-format dummy --kt-weight-path $KT8"
# ... and on the GPTQ-Int4 config (the MoE table's 16 GiB rows): the GPTQ path's preset steps
KITGP="--preset moe --model-path $GQ --load-format dummy --kt-weight-path $KT8"
FULL="--new-tokens 128 --streams 1,4 --ttft 512,8192,30000 --ttft-new-tokens 64 --repeat ${REPEAT:-1} ${PROBE_EXTRA:-}"
SHORT="--new-tokens 128 --streams 1 --ttft 8192 --ttft-new-tokens 64"
# the recorder as kt-placement wants it (one spelling: vramkit/adapters/expert_dump.py)
RECORD_FLAGS=$(python3 -c "from vramkit.adapters.expert_dump import RECORD_FLAGS; print(RECORD_FLAGS)")
counts_json() {  # REC_DIR OUT.json: the newest recorder dump in REC_DIR, its steps summed by the kit's reader
  # (vramkit/adapters/expert_dump.py, as kt-placement reads it), written as {"logical_count": [layer][expert]};
  # prints the dump's path (nothing, and status 1, where there is none)
  local dump; dump=$(ls -t "$1"/*.pt 2>/dev/null | head -1)
  [ -n "$dump" ] && python3 -c "import json, sys; from vramkit.adapters.expert_dump import read_counts
json.dump({'logical_count': [[int(x) for x in r] for r in read_counts(sys.argv[1])[0]]}, open(sys.argv[2], 'w'))" \
    "$dump" "$2" && echo "$dump"
}
if [ "${DUMMY_BY_NAME:-1}" = 0 ]; then DUMMY_BY_NAME=; else DUMMY_BY_NAME=1; fi   # on unless DUMMY_BY_NAME=0
kit() {  # name budget probe-args [--env K=V ...] -- up args
  local n=$1 b=$2 pr=$3; shift 3
  step "kit $n (${b} GiB)"
  VRAMKIT_DEVICE_LABEL="$GPU_NAME, memory emulated at $b GiB" timeout 1200 python3 benchmarks/gpu/moe_point.py \
    --name "$n" --out "$RES" --wait-file $W/build-rc.txt --probe="$pr --label $n" \
    ${DUMMY_BY_NAME:+--env VRAMKIT_DUMMY_SEED_BY_NAME=1} "$@" 2>&1 | tail -8 \
    | tee -a "$RES/progress.txt"
  pack
}
snap() {  # name up-args...: one 16 GiB start under torch's memory recorder (the adapter's VRAMKIT_CUDA_SNAPSHOT), the SHORT
  # probe, the load's summary and whole trace (alloc_snapshot.py --detail; replay_trace.py replays it)
  local n=$1; shift
  kit $n 16 "$SHORT" --env VRAMKIT_CUDA_SNAPSHOT=$W/$n-load -- "$@"
  python3 benchmarks/gpu/alloc_snapshot.py $W/$n-load.gpu0.pickle --out "$RES/$n-load-snapshot.json" \
    --detail "$RES/$n-load-detail.json" > "$RES/logs/$n-load-snapshot.txt" 2>&1 && gzip -9f "$RES/$n-load-detail.json"
  step "$n load snapshot: $(head -c 200 "$RES/$n-load-snapshot.json" 2>/dev/null | tr '\n' ' ')"
}

# ---- llama.cpp --------------------------------------------------------------------------------------------
LSRV="-c 32768 -np 4 -kvu -fa on -ctk q8_0 -ctv q8_0 -t $THREADS --host 127.0.0.1 --port 8080"
lserver() {  # name args...: start llama-server, 0 when healthy (log in $RES/NAME.llama.log)
  local n=$1; shift
  $BIN/llama-server -m "${LGGUF:-$GGUF}" $LSRV "$@" > "$RES/$n.llama.log" 2>&1 & lpid=$!
  local t0=$(date +%s)
  until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/health', timeout=2)" 2>/dev/null; do
    kill -0 $lpid 2>/dev/null || { wait $lpid 2>/dev/null; return 1; }
    [ $(( $(date +%s) - t0 )) -gt 240 ] && { kill $lpid; wait $lpid 2>/dev/null; return 1; }
    sleep 1
  done
  echo "$(( $(date +%s) - t0 ))" > "$RES/$n.start_s"
  return 0
}
lstop() { kill $lpid 2>/dev/null; wait $lpid 2>/dev/null; sleep 2; }
lprobe() {  # name probe-args
  local n=$1; shift
  timeout 600 python3 benchmarks/gpu/moe_probe.py --api llamacpp --url http://127.0.0.1:8080 \
    --out "$RES/$n.probe.json" --label "$n" "$@" 2>&1 | tee -a "$RES/progress.txt"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader > "$RES/$n.smi.txt"
}
lfull() {  # name args...: llama-server with these arguments, the full probe, stopped; 1 where it did not start
  local n=$1; shift
  lserver "$n" "$@" && { lprobe "$n" $FULL; lstop; }
}
llama() {  # budget first-n-cpu-moe [name-prefix GGUF]: llama.cpp's points at one card size (LGGUF: that file)
  local b=$1 n=$2 tag=${3:-llama-$1} best= tries=0 up=
  LGGUF=${4:-$GGUF}
  [ -f $BUILT ] || { step "llama.cpp not built: $(cat $W/build-rc.txt 2>/dev/null); $(tail -5 $W/ninja.log $W/cmake.log 2>/dev/null | tr '\n' ' ' | tail -c 600)"; return; }
  ballast "$b"
  step "$tag fit ($(basename $LGGUF))"
  lfull "$tag-fit" --fit on || step "$tag-fit did not start"
  pack
  # --n-cpu-moe: the lowest that starts (KV for the whole 32K and the compute buffers are allocated at start)
  while [ $tries -lt 6 ] && [ "$n" -ge 0 ] && [ "$n" -le 48 ]; do
    tries=$((tries + 1))
    if lserver "$tag-ncmoe$n" --fit off -ngl 99 --n-cpu-moe "$n"; then
      step "$tag --n-cpu-moe $n starts"; best=$n; up=1; lstop
      [ "$n" -eq 0 ] && break; n=$((n - 1))
    else
      step "$tag --n-cpu-moe $n does not start: $(grep -iE 'out of memory|failed to|error' "$RES/$tag-ncmoe$n.llama.log" | head -2 | tr '\n' ' ' | tail -c 300)"
      [ -n "$up" ] && break; n=$((n + 1))
    fi
  done
  [ -z "$best" ] && return
  echo "$best" > "$RES/$tag-best-ncmoe.txt"
  step "$tag best --n-cpu-moe $best: server probe"
  lfull "$tag-best" --fit off -ngl 99 --n-cpu-moe "$best"
  pack
  step "$tag llama-bench --n-cpu-moe $best"
  local LB="-m $LGGUF -ngl 99 -ncmoe $best -fa 1 -ctk q8_0 -ctv q8_0 -o json"
  timeout 300 $BIN/llama-bench $LB -p 512 -n 128 -d 0,8192 -r 3 -t "${LB_THREADS:-$THREADS,$PHYS}" \
    > "$RES/$tag-bench-d0-8k.json" 2> "$RES/logs/$tag-bench-d0-8k.err"
  [ "${LB_D30K:-1}" = 0 ] || timeout 300 $BIN/llama-bench $LB -p 512 -n 64 -d 30000 -r 1 -t "$THREADS" \
    > "$RES/$tag-bench-d30k.json" 2> "$RES/logs/$tag-bench-d30k.err"
  python3 -c "
import json
for f in ('d0-8k', 'd30k'):
    try: rows = json.load(open('$RES/$tag-bench-' + f + '.json'))
    except Exception as e: print(f, 'no result', e); continue
    for r in rows: print(f\"pp{r['n_prompt']}/tg{r['n_gen']} depth {r['n_depth']} t{r['n_threads']}: {r['avg_ts']:.1f} tok/s\")" \
    | tee -a "$RES/progress.txt"
  pack
}

lpair() {  # budget n-cpu-moe [name-prefix GGUF]: llama-server with --fit and with --n-cpu-moe N (the best earlier sweeps
  # found), full probe each
  local tag=${3:-llama-$1}
  [ -f $BUILT ] || { step "llama.cpp not built: $(cat $W/build-rc.txt 2>/dev/null)"; return 1; }
  LGGUF=${4:-$GGUF}; ballast "$1"
  step "$tag fit and --n-cpu-moe $2 ($(basename $LGGUF))"
  echo "$2" > "$RES/$tag-best-ncmoe.txt"   # first: the setting travels with a probe cut short (a machine lost)
  lfull "$tag-fit" --fit on
  lfull "$tag-best" --fit off -ngl 99 --n-cpu-moe "$2"
  pack
}

lpair_q8() {  # [1]: llama.cpp's Q8_0 pair at $THREADS; with 1, then again with -t $PHYS (every physical core), the
  # report taking the best per row over both
  lpair 16 "${Q8_NCMOE:-28}" llama-q8-16 $Q8 || return
  [ "${1:-0}" = 1 ] || return 0
  step "llama-q8-16 fit and --n-cpu-moe ${Q8_NCMOE:-28} at $PHYS threads"
  lfull "llama-q8-16-fit-t$PHYS" --fit on -t "$PHYS"
  lfull "llama-q8-16-best-t$PHYS" --fit off -ngl 99 --n-cpu-moe "${Q8_NCMOE:-28}" -t "$PHYS"
  pack
}
fp8cpu_point() {  # the moe preset with its CPU experts read from a written 48-layer FP8 checkpoint (--kt-method FP8)
  local C48=$CK/fp8-48l
  rm -rf $KT8   # the disk holds one 29 GB expert set at a time
  [ -f $C48/model.safetensors.index.json ] || python3 tools/make_random_checkpoint.py $MODEL_CFG $C48 --format fp8 \
    > $RES/fp8-48l.json 2> $RES/logs/fp8-48l.err
  step "48-layer FP8 checkpoint: $(tail -c 300 $RES/fp8-48l.json 2>/dev/null) ($(elapsed) s)"
  ballast 16
  kit k16-fp8cpu 16 "$FULL" -- --preset moe --model-path $FP8 --load-format dummy --kt-method FP8 \
    --kt-weight-path $C48
}

if [ -n "$need_gptq" ]; then   # nothing measured while nvcc and the llama.cpp build share the CPU
  step "waiting for the marlin JIT prewarm"; wait $prewarm_pids; step "$(tr '\n' ' ' < "$RES/logs/prewarm-jit.txt")"
  tar -czf $W/tvm-ffi-cache.tar.gz -C "$TVM_FFI_CACHE_DIR" . 2>/dev/null
  [ -n "$need_llama" ] && { wait $build_pid 2>/dev/null; step "llama.cpp build: $(cat $W/build-rc.txt 2>/dev/null)"; }
fi
for b in 16 24; do
  if has kit-$b; then
    ballast $b
    if [ $b = 16 ]; then kit k16 16 "$FULL" -- $KIT; else kit k24 24 "$FULL" -- $KIT; fi
  fi
  [ -n "$need_llama" ] && { wait $build_pid 2>/dev/null; step "llama.cpp build: $(cat $W/build-rc.txt 2>/dev/null)"; }
  if has llama-$b; then if [ $b = 16 ]; then llama 16 11; else llama 24 2; fi; fi
done

if has gptq; then  # issue 18 item 2, int4 GPU experts: SGLang's marlin MoE on the GPU, KT's AMXINT8 on the CPU
  ballast 24   # every expert fits: the plan drops the hybrid mode (no kt-kernel)
  kit k24-gptq 24 "$FULL" -- $KITG
  ballast 16   # whole layers on the GPU (the placement lever), the rest on the CPU
  kit k16-gptq-layers 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8
  kit k16-gptq-layers-defer2 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KITG --kt-method AMXINT8 \
    --kt-weight-path $KT8 --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --kt-max-deferred-experts-per-token 2"
fi
if has gptq-bf16; then  # 2026-11-27 run 1: with float16 activations (the GPTQ config's dtype) the KT layers decoded
  # 11-27 tok/s against 38.8 for FP8 (bf16); the same with SGLang's --dtype bfloat16 (marlin compiled for bf16)
  BF="$VRAMKIT_SGLANG_EXTRA_ARGS --dtype bfloat16"
  ballast 16
  kit k16-gptqbf-layers 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KITG --kt-method AMXINT8 \
    --kt-weight-path $KT8 --extra-args "$BF"
fi
if has diag-fp16; then  # the FP8 checkpoint's config with float16 activations, whole layers: is float16 the cause?
  F16=$CK/fp8cfg-f16; mkdir -p $F16
  python3 -c "import json; c = json.load(open('$FP8/config.json')); c['torch_dtype'] = 'float16'
json.dump(c, open('$F16/config.json', 'w'), indent=2)"
  ballast 16
  kit k16-fp8f16-layers 16 "$SHORT" --env VRAMKIT_KT_GPU_LAYERS=auto -- --preset moe --model-path $F16 \
    --load-format dummy --kt-method AMXINT8 --kt-weight-path $KT8
fi
if has gptq-bf16; then
  ballast 16
  kit k16-gptqbf-layers-defer2 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KITG --kt-method AMXINT8 \
    --kt-weight-path $KT8 --extra-args "$BF --kt-max-deferred-experts-per-token 2"
fi
if has gptq24; then  # 24 GiB, every GPTQ expert on the GPU: the same again, then with 32 KV splits in the triton
  # decode-attention kernel (SGLang's default 8; "larger is better in longer context"): the 8K decode gap to llama.cpp
  # (2026-11-27 run3 ran these before config/sglang.toml carried the 32: the first point's 8 is explicit now, the
  # last flag given wins in SGLang's parser)
  ballast 24
  kit k24-gptq-again 24 "$FULL" -- $KITG --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --triton-attention-num-kv-splits 8"
  kit k24-gptq-kv32 24 "$FULL" -- $KITG --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --triton-attention-num-kv-splits 32"
fi
if has wna16; then  # GPTQ-Int4 experts split N per layer on SGLang's moe_wna16 (the triton MoE kernel skips the CPU
  # experts' masked ids, which marlin reads out of bounds): the plan picks it for a split layer (--moe-kernel auto);
  # at 16 GiB as planned, then with 2 deferred experts; at 24 GiB (every expert on the GPU, marlin as planned, 32 KV
  # splits from config/sglang.toml) beside moe_wna16 asked for (the kernel lever at 4 streams)
  ballast 16
  kit k16-wna16 16 "$FULL" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8
  kit k16-wna16-defer2 16 "$FULL" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8 \
    --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --kt-max-deferred-experts-per-token 2"
  ballast 24
  kit k24-gptq-kv32 24 "$FULL" -- $KITG
  kit k24-wna16 24 "$FULL" -- $KITG --moe-kernel wna16
fi
if has again; then  # k16-wna16 decoded 41.8 tok/s after 512 tokens right after start, 60.9 after 8K and 49.5 after
  # 30K minutes later (more context only adds work): the same point with the 512-token decode repeated at the end
  ballast 16
  kit k16-wna16-again 16 "$FULL --again" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8
fi
if has gensweep; then  # that run: 45.5 / 44.6 tok/s over 128 tokens, 64.1 over the 64 after a 512-token prompt (llama.cpp:
  # 93.0 / 91.2): the decode rate against the number of tokens a request generates, 32 to 256
  ballast 16
  kit k16-wna16-gen 16 "--streams '' --ttft '' --gen-sweep 32,64,96,128,192,256,64" -- $KITG --kt-method AMXINT8 \
    --kt-weight-path $KT8
fi
if has med3; then  # the median session: each engine at 16 GiB, then at 24 GiB, then the levers left at 16 GiB
  # (whole layers first: the one configuration not measured yet; llama.cpp's sweep starts at the earlier best)
  LAY="--env VRAMKIT_KT_GPU_LAYERS=auto"; CPU8="--kt-method AMXINT8 --kt-weight-path $KT8"
  ballast 16
  kit k16-wna16-layers 16 "$FULL" $LAY -- $KITG $CPU8
  llama 16 11
  ballast 16
  kit k16-wna16 16 "$FULL" -- $KITG $CPU8
  ballast 24
  kit k24-gptq-kv32 24 "$FULL" -- $KITG
  llama 24 0
  ballast 16
  kit k16-wna16-layers-defer2 16 "$FULL" $LAY -- $KITG $CPU8 \
    --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --kt-max-deferred-experts-per-token 2"
  kit k16-wna16-defer2 16 "$FULL" -- $KITG $CPU8 --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --kt-max-deferred-experts-per-token 2"
fi
if has llama-q8; then  # the 8-bit class, both engines (benchmarks/results/gpu/peer-accuracy/: llama.cpp's Q4_K_M experts err
  # about twice the preset's): the kit's FP8 GPU experts + AMXINT8 CPU experts as planned and with whole layers on the
  # GPU, then llama.cpp on a Q8_0 file (~18 of 48 layers' experts fit beside the 32K pool at 16 GiB: the sweep starts at
  # 30); the report pairs them as moe-vs-llamacpp-q8-16g. KT's AMXINT8 layout (27 GiB) goes before the Q8_0 file
  # (30 GiB) is written: the disk holds one of them beside the rest, so no later step of this session can use it
  # Medians (2026-11-27's single rounds put the preset at 0.97x, inside its own ~20 % request-to-request spread):
  # REPEAT=3 Q8_LAYERS=0 Q8_NCMOE=28 LB_D30K=0 STEPS="setup llama-q8" fits one machine's 30 minutes (~25 min: the
  # whole-layer twin left out, llama.cpp's sweep started at the 28 that session found)
  ballast 16
  kit k16-int8 16 "$FULL" -- $KIT8
  [ "${Q8_LAYERS:-1}" = 0 ] || kit k16-int8-layers 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KIT8
  q8_for_llama
  llama 16 "${Q8_NCMOE:-30}" llama-q8-16 $Q8
fi
# (fp8stage, fp8pin and fp8int8 run before lprefill8, which removes KT's AMXINT8 layout to make room for the Q8_0 file)
if has fp8stage; then  # the FP8 prompt path's staging set in segments of its own (the adapter empties the allocator's
  # cache first): 2026-11-28's eighteenth session measured 1.17 GiB of "mem usage" for the 0.57 GiB set placed in the
  # load's cached blocks (k16-int8-prefill: a 27,612-token pool against 40,457 planned, and a 30K prompt refused).
  # One server (~4 min after setup): STEPS="setup fp8stage"
  ballast 16
  kit k16-int8-prefill 16 "$FULL" -- $KITF8 --kt-gpu-prefill 1024
fi
if has fp8pin; then  # the FP8 preset as it comes (the prompt path on by auto) with each CPU layer's copy pinned at its
  # own size (VRAMKIT_KT_PREFILL_PIN=register: cudaHostRegister, as torch.distributed's checkpoint stager does) instead
  # of PyTorch's power-of-two pinned blocks: 17.5 instead of 23.3 GiB for 31 layers; the bench copied as fast (54.8
  # against 54.4 GB/s, moe-gpu-prefill/fp8-bench/c). Does the server start, pin, and answer as fast? If so the planner
  # may count exact sizes. ~6 min with setup: STEPS="setup fp8pin"; ran 2026-11-28, nineteenth session
  # (moe-gpu-prefill/fp8-register/: 5.8 GiB less RSS, the same TTFT): register is the adapter's default since
  ballast 16
  kit k16-int8-register 16 "$FULL" --env VRAMKIT_KT_PREFILL_PIN=register -- $KITF8
fi
if has fp8int8; then  # the FP8 prompt path's int8 arithmetic (--kt-prefill-fp8 int8: each CPU layer's FP8 values
  # requantized at load to int8 per row and 128 inputs, bf16 inputs, SGLang's moe_wna16 8-bit triton MoE): 4.82 %
  # MoE-layer error on the CPU proxy against 6.38 % for the w8a8 path and 5.38 % for kt-kernel's AMXINT8. The bench's
  # numeric check against the float32 reference on the FP8 values (w8a8 read 5.10 %) and its timing, then the FP8
  # preset with it in a server (its pool, TTFT, start). ~7 min with setup: DUMMY_BY_NAME=1 STAGE=.stage-gg
  # STEPS="setup fp8int8"; its benches ran 2026-11-28, twentieth session, on an H200 (moe-gpu-prefill/fp8-bench/h200/:
  # int8 2.85 %, w8a8 5.10 %), its server refused there (the H200 not yet in config/gpus.toml): lint8 ran it since
  ballast_off
  for f in fp8-int8 fp8; do   # w8a8 beside it on the same machine: the two checks' errors and run_ms, paired
    timeout 300 python3 benchmarks/gpu/gpu_prefill_bench.py --format $f --pin register \
      --cpu-layers ${FP8_CPU_LAYERS:-31} --out "$RES/gpu-prefill-bench-$f.json" \
      > "$RES/logs/gpu-prefill-bench-$f.txt" 2>&1
    step "gpu prefill bench $f: $(tr '\n' ' ' < "$RES/gpu-prefill-bench-$f.json" 2>/dev/null | head -c 400)"
  done
  pack
  ballast 16
  kit k16-int8-prefill-int8 16 "$FULL" -- $KITF8 --kt-gpu-prefill 1024 --kt-prefill-fp8 int8
fi
if has lint8; then  # the FP8 preset with the prompt path's int8 arithmetic (--kt-prefill-fp8 int8) beside llama.cpp on
  # Q8_0 on one machine, the kit first (KT's AMXINT8 layout goes before the Q8_0 file is written). Written 2026-11-28,
  # twentieth session, for the H200 host's first round (~12 min with setup and the llama.cpp build):
  # DUMMY_BY_NAME=1 STAGE=.stage-gg STEPS="setup lint8"; ran that session (moe-vs-llamacpp-q8/h200/); for medians, run
  # it three times on one machine, $RES moved aside between runs, and merge (moe_vs_llamacpp_report.py merge)
  ballast 16
  kit k16-int8-prefill-int8 16 "$FULL" -- $KITF8 --kt-gpu-prefill 1024 --kt-prefill-fp8 int8
  q8_for_llama
  llama 16 "${Q8_NCMOE:-28}" llama-q8-16 $Q8
fi
if has med8; then  # the Q8_0 pairing at 16 GiB with every probe figure the median of 3 rounds in one start (REPEAT=3,
  # moe_probe.py --repeat), as med3 did for the Q4_K_M pairing: the FP8 preset as it comes (the prompt path by auto, in
  # int8 since 2026-11-28's twentieth session) and with prompts on kt-kernel (--kt-gpu-prefill 0: the pairing's first
  # token without the path, on the same machine), then llama.cpp on Q8_0 with --fit and with --n-cpu-moe 28 (the lowest
  # that started on every sweep: moe-vs-llamacpp-q8/, run2/, h200/), at 14 threads and at every core. Written the
  # twentieth session, not run yet (~30 min with setup and the build; ~24 with MED8_KT_PROMPTS=0):
  # DUMMY_BY_NAME=1 STAGE=.stage-gg REPEAT=3 STEPS="setup med8"
  # llama.cpp's two servers again with -t $PHYS (every physical core: llama-bench decoded 45.4 tok/s there against
  # 36.6 at 14 threads on the H200 machine, moe-vs-llamacpp-q8/h200/); the report takes its best per row over all four.
  # MED8_KT_PROMPTS=0 leaves out the kit's kt-prompts server (~6 min) where the session's time is short. llama-server
  # at every core ran on its own the twenty-first session (lt16: slower than 14 threads at depth 0 and at 4 streams),
  # so the every-core pair runs only with MED8_T16=1 (~9 min); run first 2026-11-28, twenty-third session:
  # DUMMY_BY_NAME=1 STAGE=.stage-gg REPEAT=3 MED8_KT_PROMPTS=0 STEPS="setup med8" (~18 min)
  ballast 16
  kit k16-int8-preset 16 "$FULL" -- $KITF8
  [ "${MED8_KT_PROMPTS:-1}" = 0 ] || kit k16-int8-kt-prompts 16 "$FULL" -- $KITF8 --kt-gpu-prefill 0
  q8_for_llama
  lpair_q8 "${MED8_T16:-0}"
fi
if has fp8cpu; then  # the preset's CPU experts read from the FP8 checkpoint as is (--kt-method FP8): 4.7 % MoE-layer
  # error on the proxy against 5.4 % for AMXINT8 converted from it, and no 27 GB conversion (make kt-convert). Set aside
  # on 2026-11-24 for kt-kernel's FP8 prefill (~60 tok/s: an 8K prompt in 129.8 s, README); the GPU prompt path now
  # takes the CPU layers' prompt chunks, from 128 tokens beside FP8 (the preset's auto: kt.auto_prefill_tokens, a
  # layer's copy worth ~50 tokens of that prefill at PCIe 4, derived). Whole layers as the preset places them, the GPU
  # side on dummy weights as every FP8 preset point, beside the preset as it comes (AMXINT8) on the same machine, one
  # start each. Written the twentieth session (~10 min with setup): DUMMY_BY_NAME=1 STAGE=.stage-gg STEPS="setup
  # fp8cpu"; ran 2026-11-28, twenty-second session (moe-vs-llamacpp-q8/h200-fp8cpu/): FP8 decoded 0.79x AMXINT8 (the
  # planner's per-byte pace had said 0.89x), its first token after 30K as fast
  ballast 16
  kit k16-int8-preset 16 "$FULL" -- $KITF8   # first: fp8cpu_point frees KT's AMXINT8 layout for its checkpoint
  fp8cpu_point
fi
if has kpace; then  # kt-kernel's CPU-expert time per token by method at kernel level, this machine's CPU (no server, no
  # ballast): config/engine.toml's kt_method_cpu_time_* (AMXINT8 0.81x FP8 per byte) came from one H100-host bench
  # (kt-accuracy.json bench-051-amx, 14 threads, 43 GPU experts); the H200 machines' AMXINT8 servers decoded 1.14-1.40x
  # the estimate where their FP8 ones were within 11 %. Written and run 2026-11-28, twenty-third session (~3 min with
  # boot and setup): STAGE=.stage-gg STEPS="setup kpace"
  ballast_off
  for g in 43 0; do   # 43: the H100 bench's split; 0: a whole CPU layer, as the preset places them
    timeout 300 python3 benchmarks/gpu/kt_decode_bench.py --methods FP8,AMXINT8,AMXINT4 --threads "12,$THREADS" \
      --tokens 16 --prefill 0 --gpu-experts $g --out "$RES/kt-pace-g$g.json" > "$RES/logs/kt-pace-g$g.txt" 2>&1
    step "kernel level, $g GPU experts: $(grep -h cpu_ms "$RES/logs/kt-pace-g$g.txt" | tr '\n' ' ' | cut -c1-400)"
  done
  pack
fi
if has uva; then  # the token embeddings read by the GPU from pinned host RAM (uva_embed_check.py: bit-identical gathers,
  # eager and in a replayed CUDA graph, their time against a GPU copy): the mechanism of a lever that frees the moe
  # preset's 0.58 GiB of bf16 embed_tokens, about one MoE layer's FP8 experts. Kernel level, no server. Written and run
  # 2026-11-28, twenty-third session (~2 min with boot and setup): STAGE=.stage-gg STEPS="setup uva"
  ballast_off
  timeout 120 python3 benchmarks/gpu/uva_embed_check.py --out "$RES/uva-embed.json" > "$RES/logs/uva-embed.txt" 2>&1
  step "uva embed rc=$?: $(tail -c 600 "$RES/logs/uva-embed.txt")"
  pack
fi
if has embhost; then  # the token embeddings in pinned host RAM (--kt-embed-host on: the plan gives their 0.58 GiB to the
  # pool and one more whole GPU layer, 18 of 48 at 16 GiB on the H200 machines) beside them on the GPU (off), one
  # machine, one start each, the lever first; then llama.cpp's Q8_0 pair (EMBHOST_LLAMA=1, ~8 min more with the
  # build). EMBHOST_SOLO=1: the lever's server alone (a machine's third start, after the pair). Written 2026-11-28,
  # twenty-third session; run in the twenty-fourth (~17 min with setup; moe-vs-llamacpp-q8/h200-embhost/, where the
  # control, then the preset as it came, is k16-int8-preset), after which auto became the preset's default:
  # DUMMY_BY_NAME=1 STAGE=.stage-gg REPEAT=3 STEPS="setup embhost"
  ballast 16
  kit k16-int8-embhost 16 "$FULL" -- $KITF8 --kt-embed-host on
  [ "${EMBHOST_SOLO:-0}" = 1 ] || kit k16-int8-embgpu 16 "$FULL" -- $KITF8 --kt-embed-host off
  [ "${EMBHOST_LLAMA:-0}" = 1 ] && { q8_for_llama; lpair_q8; }
fi
if has fp8solo; then  # fp8cpu's FP8 point alone (no AMXINT8 layout, no llama.cpp): a second machine's figure for the FP8
  # CPU method where a session's budget is short. Written and run 2026-11-28, twenty-second session (~6 min with boot):
  # STAGE=.stage-gg STEPS="setup fp8solo"
  ballast 16
  fp8cpu_point
fi
if has lt16; then  # llama.cpp's Q8_0 --fit server alone at every core and at $THREADS, one machine (~8 min with the build,
  # no kit point): llama-server's own thread scaling where a session's pairing lost its machine before the 16-thread
  # servers. Written and run 2026-11-28, twenty-first session: STAGE=.stage-gg STEPS="setup lt16"
  q8_gguf; step "GGUF Q8_0 ($(elapsed) s)"; wait $build_pid 2>/dev/null; step "llama.cpp build: $(cat $W/build-rc.txt)"
  [ -f $BUILT ] && { LGGUF=$Q8; ballast 16
    for t in $PHYS $THREADS; do
      lfull "llama-q8-16-fit-t$t" --fit on -t "$t"; pack
    done; }
fi
if has pair8; then  # one machine, one start each (~24 min with setup and the build): the FP8 preset as it comes, llama.cpp
  # on Q8_0 with --fit and --n-cpu-moe 28 at 14 threads and at every core (the H200 machine's llama-bench: 45.4 tok/s at
  # 16 threads against 36.6 at 14; only 14 had run as a server), then the preset's CPU experts read from the FP8
  # checkpoint as is (fp8cpu's point; last, its 29 GB checkpoint written once the Q8_0 file is gone: the disk holds
  # one of the three). Written 2026-11-28, twenty-first session: DUMMY_BY_NAME=1 STAGE=.stage-gg STEPS="setup pair8"
  # Its first run (h200-b/) lost the machine in llama.cpp's second server; llama-server at 16 threads ran on the next
  # (lt16: slower than 14 at depth 0 and at 4 streams), so the step runs the 14-thread pair only unless PAIR8_T16=1.
  # The FP8 point ran on its own the twenty-second session (fp8cpu: 0.79x the preset's decode on one machine,
  # moe-vs-llamacpp-q8/h200-fp8cpu/), so it runs here only with PAIR8_FP8=1 (~6 min)
  ballast 16
  kit k16-int8-preset 16 "$FULL" -- $KITF8
  q8_for_llama
  lpair_q8 "${PAIR8_T16:-0}"
  [ "${PAIR8_FP8:-0}" = 1 ] && { rm -f $Q8; fp8cpu_point; }
fi
if has kprefill8 || has lprefill8; then  # the moe preset on its own block-FP8 checkpoint (whole layers, AMXINT8 CPU
  # experts) as it comes (kt_gpu_prefill auto: on for FP8 since 2026-11-28's eighteenth session, where host RAM holds
  # the pinned copies, as the GPU host's does) and with prompts on kt-kernel (--kt-gpu-prefill 0); lprefill8 adds
  # llama.cpp on Q8_0 (the 8-bit pairing, moe-vs-llamacpp-q8-16g), its sweep from Q8_NCMOE (28: the best found): KT's
  # AMXINT8 layout goes before the Q8_0 file is written (the disk holds one of them). ~20 min with the builds:
  # DUMMY_BY_NAME=1 STAGE=.stage-gg STEPS="setup lprefill8"; for medians, run it three times on one machine, $RES moved
  # aside between runs, and merge (moe_vs_llamacpp_report.py merge), as moe-gpu-prefill/run3 was.
  # Ran 2026-11-28, eighteenth session, as it was then (the preset with the path off, and --kt-gpu-prefill 1024 before
  # the adapter's staging fix; moe-vs-llamacpp-q8/run2/); the fp8stage step ran the path after the fix.
  ballast 16
  kit k16-int8-preset 16 "$FULL" -- $KITF8
  kit k16-int8-kt-prompts 16 "$FULL" -- $KITF8 --kt-gpu-prefill 0
  if has lprefill8; then
    q8_for_llama
    llama 16 "${Q8_NCMOE:-28}" llama-q8-16 $Q8
  fi
fi
# KT threads on every physical core (2026-11-27, after llama-q8 on the same machine, a step since removed: its point
# moe-vs-llamacpp-q8/k16-int8-t16 decoded 1.7 tok/s against 36.1 at 14): vramkit up refuses that count now (exit 64)
llama_sweep() {  # llama.cpp's per-token budget: llama-bench's decode with --n-cpu-moe swept (the all-GPU step and the
  # cost per CPU layer) and by threads, without the ballast (--n-cpu-moe alone sets the placement; the card's size only
  # decides what starts), summarized by decode_profile.py sweep
  ballast_off
  local LB="-m $GGUF -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -o json -p 0 -n 64 -r 2" n t
  for n in 0 6 11 18 24 36 48; do
    timeout 120 $BIN/llama-bench $LB -ncmoe $n -t $THREADS > "$RES/llama-sweep-ncmoe$n.json" 2> "$RES/logs/llama-sweep-$n.err"
  done
  for t in 6 10; do   # the CPU layers' cost by thread count (every layer's experts on the CPU)
    timeout 120 $BIN/llama-bench $LB -ncmoe 48 -t $t > "$RES/llama-sweep-ncmoe48-t$t.json" 2> "$RES/logs/llama-sweep-48-t$t.err"
  done
  python3 benchmarks/gpu/decode_profile.py sweep "$RES"/llama-sweep-ncmoe*.json > "$RES/llama-sweep.json" 2>&1
  step "llama.cpp sweep: $(tr -d ' \n' < "$RES/llama-sweep.json" | tail -c 400)"
  pack
}
if has profile4; then  # the int4 preset's per-token budget measured (written 2026-11-29, thirty-second session; ran in
  # the thirty-third, moe-vs-llamacpp-int4/r6-prof/, where the server segfaulted after the profile, in torch's profiler
  # (libkineto's MemoryTraceLogger destructor, the evidence file): no TTFT figures; an earlier profiled 4-stream run had
  # crashed in the profiler too): SGLang's profiler over 32 decode steps at
  # 1 and 4 streams on the preset as it comes (moe_probe.py --profile-steps: decode_profile.py's budget in the probe's
  # JSON), then llama.cpp's llama-bench sweep beside it. ~12 min after the builds: DUMMY_BY_NAME=1 STAGE=.stage-l
  # STEPS="setup profile4"
  ballast 16
  kit k16-preset-int4-prof 16 "$FULL --profile-steps 32 --profile-dir $W/prof" -- $KITGP --kt-cpu-decode int4
  if [ -f $BUILT ]; then llama_sweep; else step "llama.cpp not built: $(cat $W/build-rc.txt 2>/dev/null)"; fi
fi
if has profile; then  # issue 18 item 2, the per-token budgets measured (2026-11-27, sixth session): the kit's best 16 GiB
  # point (GPTQ-Int4 split N per layer on moe_wna16, AMXINT8 CPU experts) and its whole-layer twin (never measured on
  # moe_wna16), each with SGLang's profiler over 32 decode steps at 1 and 4 streams (moe_probe.py --profile-steps:
  # decode_profile.py's budget) before the full probe; llama.cpp beside them (--fit and --n-cpu-moe 11, the best three
  # earlier sessions found), then llama-bench's decode with --n-cpu-moe swept (its budget: the all-GPU step and the
  # cost per CPU layer) and by threads; last the CPU-expert time at kernel level for the kit's two placements
  CPU8="--kt-method AMXINT8 --kt-weight-path $KT8"
  PROF="$FULL --profile-steps 32 --profile-dir $W/prof"
  ballast 16
  kit k16-wna16-prof 16 "$PROF" -- $KITG $CPU8
  kit k16-wna16-layers-prof 16 "$PROF" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KITG $CPU8
  lpair 16 11 && llama_sweep
  ballast_off
  for g in 88 0; do   # 88: the plan's split; 0: a layer whose experts are all on the CPU (the whole-layer placement)
    timeout 600 python3 benchmarks/gpu/kt_decode_bench.py --methods AMXINT8 --threads $THREADS --tokens 16 --prefill 0 \
      --gpu-experts $g --out "$RES/kt-bench-g$g.json" > "$RES/logs/kt-bench-g$g.txt" 2>&1
    step "kernel level, AMXINT8, $g GPU experts: $(grep -h cpu_ms "$RES/logs/kt-bench-g$g.txt" | cut -c1-240)"
  done
fi
if has med16; then  # medians of three rounds (REPEAT=3) for the 16 GiB pair of the main table: the kit's best (GPTQ-Int4
  # split on moe_wna16, AMXINT8 CPU experts) and llama.cpp's --fit and --n-cpu-moe 11 (the best every earlier sweep found)
  ballast 16
  kit k16-wna16 16 "$FULL" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8
  lpair 16 11
fi
if has k24lev; then  # 24 GiB, every GPTQ expert on the GPU (no KT): the 4-stream goal (2x llama-server; 1.66x measured)
  # needs a shorter step; SGLang's own levers for it, each beside the plan's point in one session: torch.compile of the
  # decode graphs up to batch 4, and 4 decode steps per scheduler round; then llama.cpp (--fit, --n-cpu-moe 0) beside
  ballast 24
  kit k24-gptq-kv32 24 "$FULL" -- $KITG
  kit k24-gptq-tc 24 "$FULL" -- $KITG --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --enable-torch-compile --torch-compile-max-bs 4"
  kit k24-gptq-cds4 24 "$FULL" -- $KITG --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --num-continuous-decode-steps 4"
  lpair 24 0
fi
if has kcores; then  # the KT thread count on the kit's best 16 GiB point: GPTQ-Int4 split on moe_wna16, AMXINT8
  ballast 16
  for t in ${KCORES:-14 10 12 8}; do
    kit k16-wna16-t$t 16 "$FULL" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8 --kt-cpuinfer $t
  done
fi
if has hot; then  # the placement lever on the kit's best 16 GiB point (GPTQ split on moe_wna16, AMXINT8, 14 threads)
  CPU8="--kt-method AMXINT8 --kt-weight-path $KT8"; REC=$W/rec; mkdir -p $REC
  # decode-heavy recording on other prompts (seed offset): 512-token prompts, 256 tokens each, 1 and 4 streams
  RECP=${RECP:-"--streams 1,4 --new-tokens 256 --ttft '' --repeat ${REPEAT:-1} --seed-offset 100000"}
  ballast 16
  kit k16-wna16-rec 16 "$RECP --record-experts" --env SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR=$REC -- $KITG $CPU8 \
    --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS $RECORD_FLAGS"
  dump=$(counts_json $REC $RES/expert-counts.json)
  ngpu=$(grep -o "kt_num_gpu_experts=[0-9]*" $RES/k16-wna16-rec.evidence.txt 2>/dev/null | head -1 | cut -d= -f2)
  [ -n "$dump" ] && python3 -m vramkit kt-placement "$dump" --model $GQ \
    --gpu-experts "${ngpu:-88}" --out $RES/kt-placement.json > $RES/kt-placement.txt 2>&1
  step "placement ($ngpu GPU experts): $(cat $RES/kt-placement.txt 2>/dev/null || echo 'no dump in '$REC)"
  [ -n "${HOT_REC_ONLY:-}" ] || kit k16-wna16-triv 16 "$FULL" -- $KITG $CPU8
  if [ -f $RES/kt-placement.json ] && [ -z "${HOT_REC_ONLY:-}" ]; then
    # (the adapter's dispatch maps the router's ids through the placement: on whenever one is loaded)
    kit k16-wna16-hot 16 "$FULL" -- $KITG $CPU8 --kt-placement $RES/kt-placement.json
    kit k16-wna16-hot-rec 16 "$RECP" -- $KITG $CPU8 --kt-placement $RES/kt-placement.json
  fi
fi
if has hot || has triv-rec; then  # the recorded prompts with the trivial map and no recorder: hot-rec's pair
  ballast 16
  kit k16-wna16-triv-rec 16 "${RECP:-"--streams 1,4 --new-tokens 256 --ttft '' --repeat ${REPEAT:-1} --seed-offset 100000"}" \
    -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8
fi
if has hotctl; then  # hot's control: was the placement's loss on the probe's prompts (0.84x) the routing or the cost of
  # mapping? A map that reverses each layer's experts within the GPU's 88 and within the CPU's 40: every token keeps its
  # split, the dispatch and the moved weights stay. Beside the trivial map on the same machine, 3 rounds (~9 min)
  CPU8="--kt-method AMXINT8 --kt-weight-path $KT8"
  ballast 16
  kit k16-wna16-triv 16 "$FULL" -- $KITG $CPU8
  # the split the trivial server ran (its evidence), each side reversed within itself
  ngpu=$(grep -o "kt_num_gpu_experts=[0-9]*" $RES/k16-wna16-triv.evidence.txt 2>/dev/null | head -1 | cut -d= -f2)
  python3 -c "from vramkit.core.plan import kt_placement as kp
n = ${ngpu:-88}
open('$RES/kt-placement-ctl.json', 'w').write(kp.sglang_json([list(reversed(range(n))) + list(reversed(range(n, 128)))
                                                              for _ in range(48)]))"
  step "control map: each layer's experts 0..$(( ${ngpu:-88} - 1 )) and ${ngpu:-88}..127 reversed within themselves"
  kit k16-wna16-ctl 16 "$FULL" -- $KITG $CPU8 --kt-placement $RES/kt-placement-ctl.json
fi
if has layers-t10; then  # the whole-layer stall (7.7 ms a CPU layer on the GPTQ checkpoint at 14 KT threads, against
  # 0.59 ms of kernel time): is it the oversubscription the kcores profiles showed at 14 threads (waits over 600 us
  # 3.56 times a step, 0.06 at 10)? The same whole-layer point profiled at 10 threads (~5 min)
  ballast 16
  # one round whatever REPEAT says: the question is the profile, and the hot step's medians need the device time
  # (LT10_PROBE: other probe arguments, and no profile: the point is then named k16-wna16-layers-t10)
  lt10=k16-wna16-layers-t10; [ -n "${LT10_PROBE:-}" ] || lt10=$lt10-prof
  kit $lt10 16 \
    "${LT10_PROBE:-${FULL/--repeat ${REPEAT:-1}/--repeat 1} --profile-steps 32 --profile-dir $W/prof}" \
    --env VRAMKIT_KT_GPU_LAYERS=auto -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8 --kt-cpuinfer 10
fi
if has seedcheck; then  # dummy weights seeded by parameter name (DUMMY_BY_NAME=1 on every kit point of a run; the
  # kt_compat docstring says why): does each layer route on its own, and does the prompt still set the pace? The kit's
  # best 16 GiB point, recorded (its counts: seedcheck-counts.json), then 3 rounds of the probe (~9 min). Run as
  # DUMMY_BY_NAME=1 STAGE=.stage-w16 REPEAT=3 STEPS="setup seedcheck"
  REC=$W/rec-seed; mkdir -p $REC
  ballast 16
  kit k16-wna16-seed-rec 16 "--streams 1 --new-tokens 256 --ttft '' --repeat 1 --seed-offset 100000 --record-experts" \
    --env SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR=$REC -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8 \
    --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS $RECORD_FLAGS"
  counts_json $REC $RES/seedcheck-counts.json > /dev/null
  step "seedcheck counts: $(ls $RES/seedcheck-counts.json 2>/dev/null || echo 'no dump in '$REC)"
  kit k16-wna16-seed 16 "$FULL" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8
fi
if has mf90; then  # the memory the preset leaves idle: at mem_fraction 0.85 the kit's best 16 GiB point peaked at
  # 15.43 of 17.18 GB (moe-budget/hot), and `vramkit plan` gives 0.90 six more GPU experts a layer on a 5060 Ti
  # (84 -> 90). The same machine's 0.85 point beside it, paired by prompt; peak VRAM through the 30K prompt (~7 min)
  # (after seedcheck in the same run its k16-wna16-seed is that 0.85 point: the same server, so it is not run twice)
  ballast 16
  has seedcheck || kit k16-wna16-mf85 16 "$FULL" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8
  kit k16-wna16-mf90 16 "$FULL" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8 --mem-fraction 0.90
fi
if has lbest16; then  # llama.cpp's best 16 GiB server alone (--n-cpu-moe 11, every earlier sweep's best; med16 runs --fit
  # beside it), for a same-machine pair with a run's kit points: its random GGUF draws each layer's router on its own,
  # as the kit's dummy weights do with DUMMY_BY_NAME=1 (~4 min with REPEAT=3)
  if [ -f $BUILT ]; then
    ballast 16; step "llama-16-best (--n-cpu-moe 11)"
    LGGUF=$GGUF; lfull llama-16-best --fit off -ngl 99 --n-cpu-moe 11
    echo 11 > "$RES/llama-16-best-ncmoe.txt"; pack
  else step "llama.cpp not built: $(cat $W/build-rc.txt 2>/dev/null)"; fi
fi
if has kbench; then  # the CPU layers' kernels alone, 12 threads, no server (~3 min; it waits for the llama.cpp build, as the kit's
  # first probe would, so it runs before the steps below): kt-kernel's
  # llamafile backend on llama.cpp's own Q4_K blocks (its libggml-base.so, built with llama-bench, quantizes them)
  # beside AMXINT8, LLAMAFILE_Q8_0 and RAWINT4 (kt-rawint4/kernel-bench-t12.json: 0.76 and 0.60 ms a layer; llama.cpp's
  # Q4_K CPU layer 0.41 ms in its own server): is kt-kernel's path to llama.cpp's per-layer time a Q4_K GGUF?
  # Answered 2026-11-27 (thirteenth session) by the bench alone on a CPU-only ggml (build_ggml.sh), outside this
  # driver: no, 0.66 ms a layer against AMXINT8's 0.63 on that machine (kt-llamafile/README.md)
  ballast_off
  for i in $(seq 120); do [ -f $BUILT ] || [ -f $W/build-rc.txt ] && break; sleep 5; done
  KT_GGML_LIB=$(ls $BIN/libggml-base.so $LL/build/ggml/src/libggml-base.so 2>/dev/null | head -1) \
    KT_KERNEL_CPU_VARIANT=amx timeout 900 python3 benchmarks/gpu/kt_decode_bench.py \
    --methods AMXINT8,LLAMAFILE_Q4_K,LLAMAFILE_Q8_0,RAWINT4 --threads 12 --gpu-experts 0 --layers 8 --tokens 24 \
    --prefill 512 --out "$RES/kernel-bench-q4k-t12.json" > "$RES/logs/kernel-bench-q4k.txt" 2>&1
  step "kernels: $(grep '^{' "$RES/logs/kernel-bench-q4k.txt" | cut -c1-220 | tr '\n' ' ')"
  pack
fi
if has best16; then  # the main table's 16 GiB row on one machine: the kit's best configuration (GPTQ-Int4 on moe_wna16,
  # AMXINT8, whole layers on the GPU, 12 KT threads, mem_fraction 0.90: 1.32x the split on moe-budget/seed-layers) beside
  # llama.cpp's --fit and --n-cpu-moe 11 (~14 min with REPEAT=3)
  ballast 16
  kit k16-wna16-layers-t12 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KITG --kt-method AMXINT8 \
    --kt-weight-path $KT8 --kt-cpuinfer 12
  lpair 16 11
fi
if has lmarlin || has kmarlin; then  # whole layers with the GPU layers on SGLang's marlin MoE (the 24 GiB kernel: 229.7
  # against moe_wna16's 169.2 tok/s there), then the same point on moe_wna16, paired by prompt (kmarlin: these two alone,
  # no llama.cpp build, ~10 min; ran 2026-11-27, eleventh session: moe-budget/marlin). A CPU layer skips its GPU kernel
  # in the adapter, so marlin never sees the masked ids that crash it in a split layer
  ballast 16
  KL="--kt-gpu-layers auto --kt-method AMXINT8 --kt-weight-path $KT8 --kt-cpuinfer 12"
  kit k16-marlin-layers-t12 16 "$FULL" -- $KITG $KL --moe-kernel marlin
  kit k16-wna16-layers-t12 16 "$FULL" -- $KITG $KL
  has lmarlin && lpair 16 11     # lmarlin: llama.cpp's pair beside them, for the table (~17 min with the build)
fi
if has lmf; then  # more whole layers on the GPU at 16 GiB. At the preset's mem_fraction 0.90 the server left 1.40 GB idle
  # after start (moe-vs-llamacpp-ggml/run1) and put 13 layers on the CPU where llama.cpp puts 11. `vramkit plan` (this
  # config, 15.31 GiB free) gives 0.93 101 GPU experts a layer (37 GPU layers, 11 CPU, 0.75 GiB left for a 4096-token
  # step) and 0.95 with 2048-token chunks 103 (38 GPU, 10 CPU, 0.45 GiB for a 2048-token step). Derived from run1:
  # ~0.69 ms a CPU layer in the server, so ~80 and ~85 tok/s against 72 at 0.90 and llama.cpp's 87.6. Then the 0.90
  # point and llama.cpp's pair (~20 min with the builds). (Since the marlin allowance, config/engine.toml, the plan
  # gives 36 and 37 layers there, which a re-run places; run1 placed 37 and 38)
  ballast 16
  KL="--kt-gpu-layers auto --kt-method AMXINT8 --kt-weight-path $KT8 --kt-cpuinfer 12 --moe-kernel marlin"
  kit k16-marlin-layers-mf93 16 "$FULL" -- $KITG $KL --mem-fraction 0.93
  kit k16-marlin-layers-mf95-c2048 16 "$FULL" -- $KITG $KL --mem-fraction 0.95 --chunked-prefill 2048
  # the 0.90 point's weight load under torch's memory recorder (the adapter's VRAMKIT_CUDA_SNAPSHOT): where marlin's
  # unplaced 0.06-0.07 GiB sits (kt-estimate.md); the pickle stays here, its reading comes back
  kit k16-marlin-layers-t12 16 "$FULL" --env VRAMKIT_CUDA_SNAPSHOT=$W/marlin-load -- $KITG $KL
  python3 benchmarks/gpu/alloc_snapshot.py $W/marlin-load.gpu0.pickle --out "$RES/marlin-load-snapshot.json" \
    > "$RES/logs/marlin-load-snapshot.txt" 2>&1
  step "marlin load snapshot: $(head -c 300 "$RES/marlin-load-snapshot.json" 2>/dev/null | tr '\n' ' ')"
  lpair 16 11
fi
if has gprefill; then  # the adapter's GPU prompt path for a CPU layer (kt_gpu_prefill, vramkit_gpu_prefill.py) without
  # a server: its repack, pinned copy and SGLang's marlin MoE checked against a float32 reference on 64 tokens, then
  # timed on 512-4096 tokens; the whole card (~1 min after setup)
  ballast_off
  timeout 300 python3 benchmarks/gpu/gpu_prefill_bench.py --out "$RES/gpu-prefill-bench.json" \
    > "$RES/logs/gpu-prefill-bench.txt" 2>&1
  step "gpu prefill bench: $(tr '\n' ' ' < "$RES/gpu-prefill-bench.json" 2>/dev/null | head -c 400)"
  pack
fi
if has gprefill8; then  # the same for block-FP8 experts (the moe preset's own checkpoint) on SGLang's triton MoE with FP8
  # activations: the adapter's dummy layer, its pinned copy and GpuPrefill.run against a float32 reference, then timed;
  # --cpu-layers: the FP8 preset's CPU layers on the emulated card with the path (its plan); ~1 min after setup
  ballast_off
  # then the same with the copies registered with CUDA at their own sizes (VRAMKIT_KT_PREFILL_PIN=register): pinned at
  # all, and copied as fast as PyTorch's pinned allocator's power-of-two blocks?
  for pin in alloc register; do
    sfx=; [ $pin = alloc ] || sfx=-$pin
    timeout 300 python3 benchmarks/gpu/gpu_prefill_bench.py --format fp8 --pin $pin --cpu-layers ${FP8_CPU_LAYERS:-31} \
      --out "$RES/gpu-prefill-bench-fp8$sfx.json" > "$RES/logs/gpu-prefill-bench-fp8$sfx.txt" 2>&1
    step "gpu prefill bench fp8, pin $pin: $(tr '\n' ' ' < "$RES/gpu-prefill-bench-fp8$sfx.json" 2>/dev/null | head -c 400)"
  done
  pack
fi
if has kprefill || has lprefill; then  # the preset as it comes (kt_gpu_prefill = auto since 2026-11-28's sixteenth
  # session: on this GPTQ config, prompt chunks of 1024+ tokens run the CPU layers on the GPU) beside the same preset
  # with prompts on kt-kernel (--kt-gpu-prefill 0); lprefill adds llama.cpp's pair (~14 min with the builds; kprefill
  # ~9 min after setup). Run with DUMMY_BY_NAME=1 as the main table's points. 2026-11-28 (moe-gpu-prefill/run2) ran
  # kprefill before the preset took it: --kt-gpu-prefill 256 against the preset
  ballast 16
  kit k16-preset 16 "$FULL" -- $KITGP
  kit k16-kt-prompts 16 "$FULL" -- $KITGP \
    --kt-gpu-prefill 0
  if has lprefill; then lpair 16 11; fi
fi
if has lpreset; then  # the moe preset as it comes on the GPTQ config (mem_fraction 0.93 since 2026-11-28, whole layers on
  # marlin, AMXINT8, the plan's 12 KT threads): only the model, the dummy load and the KT layout's folder are given;
  # then llama.cpp's pair. Run with DUMMY_BY_NAME=1 as the main table's points (~12 min with the builds)
  ballast 16
  kit k16-preset 16 "$FULL" -- $KITGP
  lpair 16 11
fi
if has embhost4; then  # the token embeddings in host RAM (the preset's auto since 2026-11-28's twenty-fourth session)
  # for the moe preset on the GPTQ config (the main table's 16 GiB row): their 0.58 GiB of bf16 give two more whole GPU
  # layers of GPTQ-Int4 experts, 38 of 48 against 36 at the H100 host's 15.31 GiB (derived: decode estimate 35.5
  # against 33.0 tok/s), beside them on the GPU (--kt-embed-host off), one machine, then llama.cpp's Q4_K_M pair.
  # Written 2026-11-28, twenty-third session; llama.cpp's pair only with EMBHOST_LLAMA=1 (~20 min with the builds):
  # DUMMY_BY_NAME=1 STAGE=.stage-gg REPEAT=3 STEPS="setup embhost4"
  ballast 16
  kit k16-preset 16 "$FULL" -- $KITGP
  # EMBHOST_CONTROL=0 leaves out the control (measured 2026-11-28, h200-embhost/) when the time left is short
  [ "${EMBHOST_CONTROL:-1}" = 1 ] && kit k16-preset-embgpu 16 "$FULL" -- --preset moe --model-path $GQ \
    --load-format dummy --kt-weight-path $KT8 --kt-embed-host off
  [ "${EMBHOST_LLAMA:-0}" = 1 ] && lpair 16 11
fi
if has stagesnap; then  # weight loads under torch's memory recorder (the adapter's VRAMKIT_CUDA_SNAPSHOT), each written
  # as the snapshot's summary and its whole trace (alloc_snapshot.py --detail; benchmarks/gpu/replay_trace.py replays
  # it through the planner's allocator model). 2026-11-28, twenty-seventh session (h200-stagesnap/): the GPTQ preset
  # with the GPU prompt path; the model fed its trace reserved 12,972 MiB against 12,974, and the plan's 28 MiB over
  # is the rotary cache's build temporaries, which the replay lacks. Modelled alone they push 16 other servers' pools
  # 0.9-1.45 % over SGLang's: the FP8 preset's (its prompt path) and marlin loads without the path, whose holes
  # constant (config/engine.toml) was set with those temporaries unmodelled. STAGESNAP_ALL=1 adds those two loads
  # (~3 min each), so the replay can be set beside each: DUMMY_BY_NAME=1 STAGE=.stage-gg STAGESNAP_ALL=1
  # STEPS="setup stagesnap" (~11 min with setup)
  ballast 16
  # SNAP_PRESET=0 leaves out the preset's own load (its trace: h200-stagesnap/, 2026-11-28)
  [ "${SNAP_PRESET:-1}" = 1 ] && snap k16-preset-snap $KITGP
  if [ "${STAGESNAP_ALL:-0}" = 1 ]; then
    SNAPS=${SNAPS:-kt-prompts fp8}   # which of the two (a machine lost after the first: SNAPS=fp8)
    listed kt-prompts "$SNAPS" && snap k16-kt-prompts-snap $KITGP --kt-gpu-prefill 0
    listed fp8 "$SNAPS" && snap k16-fp8-preset-snap $KITF8
  fi
fi
if has realload; then  # a checkpoint read from disk, not --load-format dummy (written 2026-11-29, twenty-ninth session):
  # every calibration and hybrid point before ran on dummy weights, whose fill makes float16 copies of each FP8
  # tensor that a real load does not. A random 48-layer FP8 checkpoint of the coder's shape (17 s), then the moe preset
  # on it with its CPU experts read from the same files (--kt-method FP8: no 29 GB KT layout beside a 31 GB checkpoint
  # on a 64 GB disk), under the recorder, then the same flags on dummy weights of the same config, same machine
  # (~8 min with setup): DUMMY_BY_NAME=1 STAGE=.stage-p STEPS="setup realload"; REALS: which of the two (real dummy)
  C48=$CK/fp8-48l
  [ -f $C48/model.safetensors.index.json ] || python3 tools/make_random_checkpoint.py $MODEL_CFG $C48 --format fp8 \
    > $RES/fp8-48l.json 2> $RES/logs/fp8-48l.err
  step "48-layer FP8 checkpoint: $(tail -c 300 $RES/fp8-48l.json 2>/dev/null) ($(elapsed) s)"
  ballast 16
  RL="--preset moe --kt-method FP8 --kt-weight-path $C48"
  listed real "${REALS:-real dummy}" && snap k16-fp8cpu-real $RL --model-path $C48 \
    --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --skip-tokenizer-init"
  listed dummy "${REALS:-real dummy}" && snap k16-fp8cpu-dummy $RL --model-path $FP8 --load-format dummy
fi
if has realload-gptq; then  # the same for the GPTQ-Int4 preset (written 2026-11-29, twenty-ninth session; not run yet):
  # a random GPTQ-Int4 checkpoint of the coder's shape from Qwen's release config (make_random_checkpoint.py --format
  # gptq, 16.9 GB: its GPU layers on marlin from disk, its CPU layers' experts read by the prompt path's reader), the
  # AMXINT8 layout beside it as setup writes it, then the preset on dummy weights of the same config (~12 min with
  # setup and the JIT cache): DUMMY_BY_NAME=1 STAGE=.stage-p STEPS="setup realload-gptq". The preset decodes the CPU
  # layers on the int4 kernel since (--kt-cpu-decode auto), so the real point also reads its raw GPTQ tensors from
  # these files. After lint4 on the same machine: the Q4_K_M GGUF (18.5 GB) goes first, or the disk cannot hold the
  # checkpoint beside KT's AMXINT8 layout (29 GB)
  GQC=$CK/gptq-48l
  [ -f $GQC/model.safetensors.index.json ] || { rm -f $GGUF; python3 tools/make_random_checkpoint.py $GQ $GQC \
    --format gptq > $RES/gptq-48l.json 2> $RES/logs/gptq-48l.err; }
  step "48-layer GPTQ-Int4 checkpoint: $(tail -c 300 $RES/gptq-48l.json 2>/dev/null) ($(elapsed) s)"
  ballast 16
  listed real "${REALS:-real dummy}" && snap k16-gptq-real --preset moe --model-path $GQC --kt-weight-path $KT8 \
    --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --skip-tokenizer-init"
  listed dummy "${REALS:-real dummy}" && snap k16-gptq-dummy $KITGP
fi
if has poolcheck; then  # points at a card size no earlier run had (20 GiB), the SHORT probe: KV pool, weights, host RSS
  # and decode against the plan, none of them used to set a constant (written 2026-11-28, twenty-eighth session, beside
  # STAGESNAP_ALL's traces: DUMMY_BY_NAME=1 STAGE=.stage-gg SNAP_PRESET=0 STAGESNAP_ALL=1 STEPS="setup stagesnap poolcheck")
  ballast 20
  POOLS=${POOLS:-preset kt-prompts fp8}   # which of the three (a machine lost midway: the rest)
  listed preset "$POOLS" && kit k20-preset 20 "$SHORT" -- $KITGP
  listed kt-prompts "$POOLS" && kit k20-kt-prompts 20 "$SHORT" -- $KITGP --kt-gpu-prefill 0
  listed fp8 "$POOLS" && kit k20-fp8-preset 20 "$SHORT" -- $KITF8
fi
int4_alone() {  # THREADS: the int4 kernel alone (no server) at these thread counts, then kt-kernel's AMXINT8 beside
  # it at 12 (the plan's KT threads), each into $RES
  timeout 300 python3 benchmarks/gpu/int4_experts_bench.py --threads "$1" --batches 1,4 \
    --out "$RES/int4-bench.json" > "$RES/logs/int4-bench.txt" 2>&1
  step "int4 kernel alone: $(grep -h '"threads": 12' "$RES/logs/int4-bench.txt" | head -c 400)"
  timeout 300 python3 benchmarks/gpu/kt_decode_bench.py --methods AMXINT8 --threads 12 --gpu-experts 0 --tokens 16 \
    --prefill 0 --out "$RES/kt-amxint8-bench.json" > "$RES/logs/kt-amxint8-bench.txt" 2>&1
  step "kt-kernel AMXINT8 alone (48 whole CPU layers a token): $(tail -c 300 "$RES/logs/kt-amxint8-bench.txt")"
  pack
}
if has int4bench; then  # the int4 kernel alone beside kt-kernel's AMXINT8 (no server; ~3 min with setup): STAGE=.stage-p
  # STEPS="setup int4bench"
  int4_alone "12,8,6,4,$PHYS"
fi
kernel_ab() {  # NAME BEFORE ISAS ROUNDS WHAT: int4_ab.sh (BEFORE against the tree's source, rounds in turn) at 12 and 8
  # threads, batches 1 and 4, no server and no ballast; its summary in $RES/NAME/
  ballast_off
  PY=python3 timeout 500 bash benchmarks/gpu/int4_ab.sh "$2" "$RES/$1" "$4" "$3" 12,8 1,4 > "$RES/logs/$1.txt" 2>&1
  step "$5: $(grep '"threads": 12' "$RES/logs/$1.txt" | tr -d '\n' | head -c 700)"
  pack
}
if has int4isa; then  # the int4 kernel's builds side by side, no server: its AVX2 build forced (the speed an AVX2-only
  # desktop's kernel has on these cores and this memory: other kernels, same host), this CPU's own, and since
  # 2026-11-29's thirty-third session the AVX-512 build with the masked nibbles (VRAMKIT_INT4_ISA=masked, V4_MASKED).
  # Until the thirty-fourth session one pass each, one build after the other (int4-bench-{isa}.json): on r7/'s machine
  # that pass, right after setup, ran ~1.5x slower than the same kernel minutes later, so no ratio could be taken from
  # it. Now int4_ab.sh with the tree's own source on both sides: every build in each round, rounds in turn, 6 runs a
  # build (int4isa/summary.json). ~3 min with setup: STAGE=.stage-p STEPS="setup int4isa"
  kernel_ab int4isa services/sglang-kt/kt_compat/int4_experts.c "avx2 native masked" "${INT4ISA_ROUNDS:-3}" \
    "int4 kernel's builds in turn"
fi
if has gshare; then  # a CPU layer's decode batch shared with the GPU, which reads that share's experts over the bus
  # (services/sglang-kt/kt_compat/vramkit_gpu_share.py; written 2026-11-29, thirty-fifth session): the adapter's
  # HostExperts with and without the share in CUDA graphs, no server (~1.5 min after setup). INT4_SHARE=auto below
  # takes the fraction fastest at batch 4 here
  ballast_off
  timeout 300 python3 benchmarks/gpu/gpu_share_bench.py --threads 12 --shares "${SHARE_FRACS:-0.2,0.25,0.3,0.35,0.4}" \
    --pin "${SHARE_PIN:-register-thp}" \
    --out "$RES/share-bench.json" > "$RES/logs/share-bench.txt" 2>&1
  rows=$(grep -h '^{"' "$RES/logs/share-bench.txt" | tr -d '\n' | head -c 1200)
  # a failed bench says why here (r8/'s said nothing: its import-order error only in the log)
  step "gpu share bench: ${rows:-failed: $(grep -h '"error"' "$RES/share-bench.json" 2>/dev/null | head -c 300)}"
  pack
fi
share_fraction() {  # INT4_SHARE: a fraction, or auto: the one share-bench.json found fastest at batch 4 (0.3 without it)
  [ "$INT4_SHARE" != auto ] && { echo "$INT4_SHARE"; return; }
  python3 -c 'import json, sys
try:
    row = json.load(open(sys.argv[1]))["ms_per_layer"]["4"]
    print(min((v, k.split("_")[1]) for k, v in row.items() if k.startswith("share_"))[1])
except Exception:
    print("0.3")' "$RES/share-bench.json"
}
if has int4ab; then  # the int4 kernel alone, the tree's against an earlier one, rounds in turn (written 2026-11-29,
  # thirty-third session; ran in the thirty-fourth, moe-vs-llamacpp-int4/r7/int4ab/: down's units by expert and units in
  # runs, 1.20-1.32x at 12 threads). Staging: the earlier source in $S (git show 1c3d7d2:services/sglang-kt/kt_compat/
  # int4_experts.c > .stage-l/int4_experts-r6.c; the device's copy of the tree has no .git). ~3 min: STEPS="setup int4ab".
  # INT4_AB_ISAS: the builds it takes (the int4isa step ranks one source's builds the same way)
  kernel_ab int4ab "${INT4_AB_BEFORE:-$S/int4_experts-r6.c}" "${INT4_AB_ISAS:-native avx2}" 3 "int4 kernel A/B"
fi
if has lint4 || has kint4; then  # the CPU layers' decode on the GPTQ-Int4 values as the checkpoint has them (the
  # adapter's opt-in VRAMKIT_KT_CPU_DECODE=int4: int4_experts.c, compiled here at the first CPU layer), first the kernel
  # alone beside kt-kernel's AMXINT8 (no server, 12 threads as the plan's KT threads), then the preset with it and
  # without it, one machine; lint4 adds llama.cpp's pair (~20 min with the builds; kint4 ~12). Written 2026-11-29,
  # thirtieth session. DUMMY_BY_NAME=1 as the main table's points
  # INT4_BENCH=0: the servers alone (a second run on the same machine, REPEAT=3). The preset takes int4 on its own
  # since (--kt-cpu-decode auto): each point names its decode. INT4_AVX2=1 (the default; written 2026-11-29,
  # thirty-first session) adds the int4 kernel's AVX2 build forced in the server (VRAMKIT_INT4_ISA=avx2: an AVX2-only
  # desktop's decode kernel on these cores and this memory; kt-kernel's prompt chunks stay on its AMX build)
  [ "${INT4_BENCH:-1}" = 1 ] && int4_alone "12,8,4,$PHYS"
  # INT4_KT=0: no kt-kernel twin. INT4_SWEEP=1 (written 2026-11-29, thirty-second session): llama.cpp's --n-cpu-moe
  # swept down from 11 on this machine (llama 16 11: the lowest that starts, llama-bench at 8K beside it) right after
  # the first point, then INT4_THREADS' counts (the int4 pool and kt-kernel's at --kt-cpuinfer N; a count ending in
  # :1 one round) and LLAMA_T16=1 llama.cpp's best again at every physical core: both engines' thread counts tried
  ballast 16
  kit k16-preset-int4 16 "$FULL" -- $KITGP --kt-cpu-decode int4
  if has lint4 && [ "${INT4_SWEEP:-0}" = 1 ]; then
    llama 16 11
    ballast 16
  fi
  [ "${INT4_KT:-1}" = 1 ] && kit k16-preset 16 "$FULL" -- $KITGP --kt-cpu-decode kt
  [ "${INT4_AVX2:-1}" = 1 ] && kit k16-preset-int4-avx2 16 "$FULL" --env VRAMKIT_INT4_ISA=avx2 -- $KITGP \
    --kt-cpu-decode int4
  # INT4_MASKED=1 (written 2026-11-29, thirty-third session; ran in the thirty-fourth, r7/): the AVX-512 build with
  # the masked nibbles (VRAMKIT_INT4_ISA=masked, int4_experts.c V4_MASKED), the candidate int4isa's figures rank
  [ "${INT4_MASKED:-0}" = 1 ] && kit k16-preset-int4-masked 16 "$FULL" --env VRAMKIT_INT4_ISA=masked -- $KITGP \
    --kt-cpu-decode int4
  # INT4_PIN=1 (written 2026-11-29, thirty-fourth session, not run yet): the caller (CUDA's host-function thread, which
  # computes beside the pool's workers) pinned to a core of its own (VRAMKIT_INT4_PIN_CALLER=1): r7-prof/ found the
  # kernel's call slower in the server than alone, and the log window now counts the calls whose caller shared a core
  [ "${INT4_PIN:-0}" = 1 ] && kit k16-preset-int4-pincaller 16 "$FULL" --env VRAMKIT_INT4_PIN_CALLER=1 -- $KITGP \
    --kt-cpu-decode int4
  # INT4_SHARE=F|auto (written 2026-11-29, thirty-fifth session; ran in r8/ at 0.4 with registered copies): that
  # fraction of each CPU layer's decode experts on the GPU over the bus (VRAMKIT_INT4_GPU_SHARE; the gshare step's
  # bench picks it under auto). The copies stay registered (the preset's --kt-prefill-pin) and with the share on the
  # adapter registers them on transparent huge pages (share-pin/thp/: read as fast as PyTorch's pinned allocator's,
  # where 4 KiB registered pages were 12-21 % slower)
  if [ -n "${INT4_SHARE:-}" ]; then
    f=$(share_fraction); step "the GPU's share of a CPU layer's decode experts: $f"
    kit k16-preset-int4-share 16 "$FULL" --env VRAMKIT_INT4_GPU_SHARE=$f -- $KITGP --kt-cpu-decode int4
  fi
  # its peer: llama.cpp's pair on its haswell (AVX2) CPU backend, the same GPU placement (LLAMA_CPU_VARIANTS=1)
  if has lint4 && [ "${INT4_AVX2:-1}" = 1 ] && [ -n "$LLAMA_VARIANT_TARGETS" ]; then
    bin0=$BIN; BIN=$BIN_AVX2
    lpair 16 11 llama-avx2-16
    BIN=$bin0
    # what that server could load: llama-server names no backend at its default verbosity (r6/'s logs), and ggml
    # looks only in the executable's folder and the working directory
    (cd "$BIN_AVX2" && ls libggml-cpu-*.so) | tee "$RES/llama-avx2-16-cpu-libs.txt" | tee -a "$RES/progress.txt"
  fi
  for tr in ${INT4_THREADS:-}; do
    t=${tr%%:*}; pr=$FULL; [ "$tr" = "$t:1" ] && pr=${FULL/--repeat ${REPEAT:-1}/--repeat 1}
    kit k16-preset-int4-t$t 16 "$pr" -- $KITGP --kt-cpu-decode int4 --kt-cpuinfer "$t"
  done
  if has lint4 && [ "${INT4_SWEEP:-0}" = 1 ]; then
    best=$(cat "$RES/llama-16-best-ncmoe.txt" 2>/dev/null)
    [ "${LLAMA_T16:-0}" = 1 ] && [ -n "$best" ] && { step "llama-16 --n-cpu-moe $best at $PHYS threads"
      lfull "llama-16-best-t$PHYS" --fit off -ngl 99 --n-cpu-moe "$best" -t "$PHYS"; pack; }
  elif has lint4; then lpair 16 11; fi
fi
if has lint4ab; then  # the int4 preset and llama.cpp's two modes started in turn, STARTS rounds (default 3), each
  # round a fresh start of each (NAME-sN points), then moe_starts.py's medians and each round's paired ratio (written
  # 2026-11-29, thirty-second session, not run yet: r5-again/ found one start 0.90x the one before, the order of the
  # kit's margin at depth 0). ~6 min a round after the builds: DUMMY_BY_NAME=1 REPEAT=3 STAGE=.stage-l
  # STEPS="setup lint4ab" (STARTS=2 fits one session's device time beside the setup)
  ballast 16
  for s in $(seq 1 "${STARTS:-3}"); do     # the kit's start waits for the llama.cpp build (moe_point.py --wait-file)
    kit k16-preset-int4-s$s 16 "$FULL" -- $KITGP --kt-cpu-decode int4
    [ -f $BUILT ] || { step "llama.cpp not built: $(cat $W/build-rc.txt 2>/dev/null)"; continue; }
    step "round $s: llama-16 --n-cpu-moe ${LLAMA_NCMOE:-11} and --fit"
    lfull llama-16-best-s$s --fit off -ngl 99 --n-cpu-moe "${LLAMA_NCMOE:-11}"
    lfull llama-16-fit-s$s --fit on
    pack
  done
  python3 benchmarks/gpu/moe_starts.py "$RES" --out "$RES/starts" > "$RES/logs/starts.txt" 2>&1
  step "starts: $(head -c 1200 "$RES/starts.md" 2>/dev/null)"
  pack
fi
if has lggml; then  # the CPU layers' decode on llama.cpp's own CPU kernels (the adapter's opt-in VRAMKIT_KT_GGML: ggml
  # Q4_K/Q6_K from the Q4_K_M GGUF llama.cpp reads, CPU_REPACK as llama.cpp places it; prompt chunks stay on kt-kernel's
  # AMXINT8), whole layers on marlin, beside the same server all on kt-kernel, then llama.cpp's pair (~25 min with the
  # builds). Timed alone at 12 threads ggml's layer took 0.54 ms, kt-kernel's 0.76 (cpu-moe-kernels/); in the server
  # the two were even (2026-11-27, moe-vs-llamacpp-ggml/run2); the shim's log lines now say where ggml's time goes
  STAGE=$S PY=python3 bash benchmarks/gpu/build_ggml.sh $W/gg cpu > "$RES/logs/build-ggml.txt" 2>&1
  step "ggml + shim: $(tail -1 "$RES/logs/build-ggml.txt") ($(elapsed) s)"
  timeout 400 python3 benchmarks/gpu/ggml_experts_check.py --lib-dir $W/gg/lib-native --threads 12 --full-layers 8 \
    --out "$RES/ggml-experts-check.json" > "$RES/logs/ggml-experts-check.txt" 2>&1
  step "ggml experts check: $(tail -1 "$RES/logs/ggml-experts-check.txt" | head -c 300)"
  pack
  ballast 16
  KL="--kt-gpu-layers auto --kt-method AMXINT8 --kt-weight-path $KT8 --kt-cpuinfer 12"
  GG="--env VRAMKIT_KT_GGML=$GGUF --env VRAMKIT_GGML_LIB_DIR=$W/gg/lib-native"
  kit k16-marlin-layers-ggml-t12 16 "$FULL" $GG -- $KITG $KL --moe-kernel marlin
  kit k16-marlin-layers-t12 16 "$FULL" -- $KITG $KL --moe-kernel marlin
  # kt-kernel's 12 workers beside ggml's 12 threads on 16 cores: the same with 4 KT workers (the prompt's share)
  kit k16-marlin-layers-ggml-kt4 16 "$FULL" $GG --env VRAMKIT_GGML_THREADS=12 -- $KITG \
    --kt-gpu-layers auto --kt-method AMXINT8 --kt-weight-path $KT8 --kt-cpuinfer 4 --moe-kernel marlin
  lpair 16 11
fi
if has raw4 || has kraw4; then  # the GPTQ checkpoint's own int4 values on the CPU too (RAWINT4, kt_repack): whole
  # layers on marlin, beside the same server with AMXINT8 CPU layers, paired by prompt; raw4 adds llama.cpp's pair for
  # the table (~20 min with the build; kraw4: the two kit points alone)
  KR4=$CK/kt-raw4
  # does the AMX build compute the nibble 0 (-8) right? (the avx512_bf16 build does not: kt-rawint4/)
  KT_KERNEL_CPU_VARIANT=amx timeout 300 python3 benchmarks/gpu/kt_rawint4_check.py --threads 8 \
    --out "$RES/rawint4-check-amx.json" > "$RES/logs/rawint4-check-amx.txt" 2>&1
  step "RAWINT4 check (amx): $(grep -E '^(as_|nibble)' "$RES/logs/rawint4-check-amx.txt" | tr '\n' ' ' | head -c 600)"
  # the CPU layers' files only (the plan puts 13 of 48 on the CPU; 16 written)
  [ -f $KR4/rawint4-layer-015.safetensors ] || python3 tools/make_random_checkpoint.py $MODEL_CFG $KR4 \
    --kt-layout RAWINT4 --layers 16 > "$RES/kt-raw4.json" 2> "$RES/logs/kt-raw4.err"
  step "KT RAWINT4 files: $(tail -1 "$RES/kt-raw4.json") ($(elapsed) s)"
  pack
  ballast 16
  # the AMXINT8 twin first, and RAWINT4 without the 30K first token (ran 2026-11-27, twelfth session: 38.5 s after
  # 8K, so ~2.5 min a 30K request; kt-rawint4/run1)
  kit k16-marlin-layers-t12 16 "$FULL" -- $KITG --kt-gpu-layers auto --kt-method AMXINT8 --kt-weight-path $KT8 \
    --kt-cpuinfer 12
  kit k16-marlin-layers-raw4-t12 16 "${FULL/--ttft 512,8192,30000/--ttft 512,8192}" -- $KITG --kt-gpu-layers auto \
    --kt-method RAWINT4 --kt-weight-path $KR4 --kt-cpuinfer 12
  has raw4 && lpair 16 11
fi
if has ldefer; then  # best16's kit point with 2 deferred experts a token (SGLang's --kt-max-deferred-experts-per-token:
  # a CPU layer's last experts are added one layer later, so the GPU need not wait for them; changes the outputs) (~4 min)
  ballast 16
  kit k16-wna16-layers-t12-defer2 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KITG --kt-method AMXINT8 \
    --kt-weight-path $KT8 --kt-cpuinfer 12 --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --kt-max-deferred-experts-per-token 2"
fi
if has layers-pair; then  # whole layers against the per-layer split at the same KT threads, one machine, paired by
  # prompt (layers-t10 set them on two machines, one round): 10 threads (where the stall went) and 12 (the plan's
  # default on 16 cores, not measured with whole layers); REPEAT=3 (~13 min)
  ballast 16
  for t in ${LP_THREADS:-10 12}; do
    kit k16-wna16-split-t$t 16 "$FULL" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8 --kt-cpuinfer $t
    kit k16-wna16-layers-t$t 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KITG --kt-method AMXINT8 \
      --kt-weight-path $KT8 --kt-cpuinfer $t
  done
fi
if has hotcheck || has hcref; then  # does a placement keep the outputs? (the comment at the top of this file)
  C4=$CK/fp8-4l
  # the servers' common arguments; 64 GPU experts a layer unless a step says otherwise
  K4="--preset moe --kt-gpu-layers off --model-path $C4 --kt-method FP8 --kt-weight-path $C4"
  GL="--streams '' --ttft '' --greedy-logprobs 8"
  # the adapter's dispatch: on (=1, what ran on 2026-11-27 when it was opt-in; the default since) or off (=0, SGLang as
  # pinned: the unplaced baseline and the rounding reference ran without it)
  PD="--env VRAMKIT_KT_PLACEMENT_DISPATCH=1"; NOPD="--env VRAMKIT_KT_PLACEMENT_DISPATCH=0"
  # SGLang flags: with the GPU host's (config/sglang.toml gpu_host_extra_args: KV splits 32, and no
  # --skip-tokenizer-init while the folder holds no tokenizer) every 4-layer FP8 server died at its first request with
  # "CUDA error: invalid argument", a bounded pool or not (2026-11-27, two tries, moe-budget/hotcheck/gpu-host-flags/);
  # with the 2026-11-23 FP8 runs' flags (run_moe.sh: default splits, --skip-tokenizer-init) all ran. The likely cause is
  # the missing tokenizer (every run with 32 splits that ran skipped it); `vramkit up` now refuses such a folder. A
  # bounded KV pool all the same: 4 layers on the whole card would take 16.8M tokens
  HC_EXTRA=${HC_EXTRA:-"--attention-backend triton --sampling-backend pytorch --grammar-backend none --skip-tokenizer-init"}
  XA="$HC_EXTRA --max-total-tokens 262144"
fi
if has hotcheck; then
  [ -f $C4/model.safetensors.index.json ] || python3 tools/make_random_checkpoint.py $MODEL_CFG $C4 --format fp8 \
    --layers 4 > $RES/fp8-4l.json 2> $RES/logs/fp8-4l.err
  step "4-layer FP8 checkpoint: $(tail -c 300 $RES/fp8-4l.json 2>/dev/null) ($(elapsed) s)"
  python3 -c "from vramkit.core.plan import kt_placement as kp
open('$RES/kt-placement-rev.json', 'w').write(kp.sglang_json([list(reversed(range(128))) for _ in range(4)]))"
  ballast_off
  # HC_DIAG=1: first the trivial map with CUDA_LAUNCH_BLOCKING=1, so its traceback names the failing kernel
  [ -n "${HC_DIAG:-}" ] && kit hc-diag 80 "$GL" $NOPD --env CUDA_LAUNCH_BLOCKING=1 -- $K4 --kt-num-gpu-experts 64 \
    --extra-args "$XA"
  kit hc-trivial 80 "$GL" $NOPD -- $K4 --kt-num-gpu-experts 64 --extra-args "$XA"
  kit hc-placed 80 "$GL" $PD -- $K4 --kt-num-gpu-experts 64 --kt-placement $RES/kt-placement-rev.json --extra-args "$XA"
  kit hc-placed-sglang 80 "$GL" $NOPD -- $K4 --kt-num-gpu-experts 64 \
    --extra-args "$XA --init-expert-location $RES/kt-placement-rev.json"
  kit hc-trivial-dispatch 80 "$GL" $PD -- $K4 --kt-num-gpu-experts 64 --extra-args "$XA"
  python3 benchmarks/gpu/placement_check.py compare $RES/hc-trivial.probe.json $RES/hc-placed.probe.json \
    $RES/hc-trivial-dispatch.probe.json $RES/hc-placed-sglang.probe.json > $RES/placement-check.json 2>&1
  step "placement check: $(tr -d ' \n' < $RES/placement-check.json | head -c 600)"
  pack
fi
if has hcref; then  # the rounding-only reference for hotcheck (same machine, after it): the trivial map with 32 GPU
  # experts, so experts 32-63 move from the GPU's kernel to the CPU's with no placement at all
  kit hc-g32 80 "$GL" $NOPD -- $K4 --kt-num-gpu-experts 32 --extra-args "$XA"
  python3 benchmarks/gpu/placement_check.py compare $RES/hc-trivial.probe.json $RES/hc-g32.probe.json \
    > $RES/placement-check-g32.json 2>&1
  step "rounding reference: $(tr -d ' \n' < $RES/placement-check-g32.json | head -c 400)"
  pack
fi
if has gptq-n; then  # the same, N experts per layer (no whole-layer placement), short probe
  ballast 16
  kit k16-gptq 16 "$SHORT" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8
  kit k16-gptq-int4 16 "$SHORT" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KITG --kt-method AMXINT4 --kt-weight-path $KT
fi
if has amxint8 || has amxint8-levers; then
  ballast 16
  has amxint8 && kit k16-int8 16 "$FULL" -- $KIT8
  has amxint8-levers && kit k16-int8-layers-defer2 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KIT8 \
    --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --kt-max-deferred-experts-per-token 2"
fi
if has fp8-layers; then  # the preset as planned (FP8 GPU experts, AMXINT8, the plan's threads) with the split and with
  # whole layers through the planner's own knob (--kt-gpu-layers auto), one machine, paired by prompt
  ballast 16
  kit k16-int8-split 16 "$FULL" -- $KIT8
  kit k16-int8-whole 16 "$FULL" -- $KIT8 --kt-gpu-layers auto
fi
if has ctpool; then  # torch inductor's compile workers (min(32, CPUs): 16 of 0.37 GiB on this host right after start,
  # moe-budget/best16's per-process readings; kt_hybrid.COMPILE_WORKER_BYTES): the preset as planned (FP8, whole
  # layers) with TORCHINDUCTOR_COMPILE_THREADS=1 (inductor compiles in the server's own process, no pool) and without,
  # one machine, paired by prompt: RSS right after start, start-up time (up.txt), every probe figure (~10 min)
  ballast 16
  kit k16-int8-whole-ct1 16 "$FULL" --env TORCHINDUCTOR_COMPILE_THREADS=1 -- $KIT8 --kt-gpu-layers auto
  kit k16-int8-whole 16 "$FULL" -- $KIT8 --kt-gpu-layers auto
fi
if has threads; then  # the estimate's thread and card terms on held-out runs (issue 18 item 5): 6 and 14 KT threads
  ballast 16
  # (2026-11-26: the first machine went back after k16-int8-t6; the second ran the rest and that point again)
  kit k16-int8-t14 16 "$FULL" -- $KIT8
  kit k16-int4-t6 16 "$FULL" -- $KIT --kt-cpuinfer 6
  kit k16-int8-t6 16 "$FULL" -- $KIT8 --kt-cpuinfer 6
fi
if has threads || has threads24; then  # (2026-11-26: the second machine went back at its 30 minutes; a third ran these)
  ballast 24
  kit k24-int8-t6 24 "$FULL" -- $KIT8 --kt-cpuinfer 6
  kit k24-int8-t14 24 "$FULL" -- $KIT8
fi
if has avx512; then  # issue 18 item 4: the preset's AMXINT8 on kt-kernel's AVX-512 (no AMX) build, forced: the method
  # `vramkit plan --cpu-isa avx512` plans; its layout written by that build too (same cores and memory, other kernels)
  KT8V=$CK/kt-int8-avx512
  [ -d $KT8V/_layer_47 ] || KT_KERNEL_CPU_VARIANT=avx512_bf16 python3 tools/make_random_checkpoint.py $MODEL_CFG $KT8V \
    --kt-layout AMXINT8 --kt-threads "$THREADS" > "$RES/kt-int8-avx512.json" 2> "$RES/logs/kt-int8-avx512.err"
  step "KT AMXINT8 layout (avx512_bf16 build): $(tail -c 300 "$RES/kt-int8-avx512.json") ($(elapsed) s)"
  ballast 16
  kit k16-int8-avx512 16 "$SHORT" --env KT_KERNEL_CPU_VARIANT=avx512_bf16 -- $KIT8 --kt-weight-path $KT8V
fi
if has avx2-070; then  # issue 18 item 4 on a clean avx2 build: LLAMAFILE_Q8_0 as `vramkit plan --cpu-isa avx2` plans
  # it, on kt-kernel 0.7.0 (config/versions.toml kt_kernel_avx2_pip; its avx2 build holds no AVX-512 code, the committed
  # k16-q8-avx2 runs used 0.5.1's, which does), forced (same cores and memory, other kernels). Staging: kt/ also holds
  # kt_kernel-0.7.0-cp312-*.whl (only its avx2 extension: benchmarks/gpu/stage_kt_avx2.sh), installed apart
  q8_gguf
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/kt070 $S/kt/kt_kernel-0.7.0-*.whl \
    > "$RES/logs/kt070.txt" 2>&1
  step "kt-kernel 0.7.0: $(PYTHONPATH=/tmp/kt070:$PYTHONPATH KT_KERNEL_CPU_VARIANT=avx2 python3 -c 'import kt_kernel as k; \
print(k.__version__, k.__cpu_variant__)' 2>&1 | tail -1)"
  # kernel level first, at the server's 14 threads (benchmarks/results/gpu/kt-avx2/ ran it on the dev host at 2)
  PYTHONPATH=/tmp/kt070:$PYTHONPATH KT_KERNEL_CPU_VARIANT=avx2 timeout 900 python3 benchmarks/gpu/kt_decode_bench.py \
    --methods LLAMAFILE_Q8_0,FP8,GPTQ_INT4 --threads "$THREADS" --gpu-experts 43 --out "$RES/kt070-avx2-bench.json" \
    > "$RES/logs/kt070-avx2-bench.txt" 2>&1
  step "kt-kernel 0.7.0 avx2, kernel level: $(grep -h '"method"' "$RES/logs/kt070-avx2-bench.txt" | cut -c1-200 | tr '\n' ' ')"
  ballast 16
  kit k16-q8-avx2-070 16 "--new-tokens 128 --streams 1,4 --ttft 512,8192 --ttft-new-tokens 64 --repeat ${REPEAT:-1}" \
    --env "PYTHONPATH=/tmp/kt070:$PYTHONPATH" -- --preset moe --kt-gpu-layers off --model-path $FP8 --load-format dummy --cpu-isa avx2 \
    --kt-weight-path $Q8
fi
if has llamafile || has llamafile24 || has llamafile30k; then  # issue 18 item 4: LLAMAFILE_Q8_0, kt-kernel's llamafile backend reading a
  # Q8_0 GGUF of the experts (random, the exact shape, tools/make_random_gguf.py --type Q8_0): the method
  # `vramkit plan --cpu-isa avx2` plans, on kt-kernel 0.5.1's avx2 build forced (same cores and memory, other
  # build), then on the amx build this CPU picks (the same llamafile kernels, compiled for it)
  q8_gguf
  step "GGUF Q8_0: $(cat "$RES/gguf-q8_0.json" 2>/dev/null) $(tail -2 "$RES/logs/gguf-q8_0.err" 2>/dev/null) ($(elapsed) s)"
  KITQ8="--preset moe --kt-gpu-layers off --model-path $FP8 --load-format dummy --kt-method LLAMAFILE_Q8_0 --kt-weight-path $Q8"
  MID="--new-tokens 128 --streams 1,4 --ttft 512,8192 --ttft-new-tokens 64"
  if has llamafile; then
    ballast 16
    kit k16-q8-avx2 16 "$MID" --env KT_KERNEL_CPU_VARIANT=avx2 -- $KITQ8
    kit k16-q8-amx 16 "$MID" -- $KITQ8
  fi
  if has llamafile30k; then   # the same avx2 point with the 30K prompt too (the estimate's context term)
    ballast 16
    kit k16-q8-avx2-full 16 "$FULL" --env KT_KERNEL_CPU_VARIANT=avx2 -- $KITQ8
  fi
  if has llamafile24; then
    ballast 24
    kit k24-q8-avx2 24 "$MID" --env KT_KERNEL_CPU_VARIANT=avx2 -- $KITQ8
  fi
fi
if has levers; then
  ballast 16
  kit k16-layers 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KIT
  kit k16-defer2 16 "$SHORT" -- $KIT --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --kt-max-deferred-experts-per-token 2"
  kit k16-layers-defer2 16 "$FULL" --env VRAMKIT_KT_GPU_LAYERS=auto -- $KIT \
    --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --kt-max-deferred-experts-per-token 2"
  kit k16-chunk8k 16 "--streams 1 --new-tokens 32 --ttft 30000 --ttft-new-tokens 16" -- $KIT --chunked-prefill 8192
  kit k16-defer1 16 "$SHORT" -- $KIT --extra-args "$VRAMKIT_SGLANG_EXTRA_ARGS --kt-max-deferred-experts-per-token 1"
fi
if has thp; then  # issue 18 item 2's huge pages: the kit's best 16 GiB point (kcores' k16-wna16-t14, the same probe, is the
  # baseline as the host has them) with transparent huge pages "always", then the host's setting back
  THP=/sys/kernel/mm/transparent_hugepage/enabled
  was=$(sed -n 's/.*\[\(.*\)\].*/\1/p' $THP 2>/dev/null); was=${was:-unknown}
  step "THP: $(cat $THP 2>/dev/null || echo 'not readable') (AnonHugePages $(grep AnonHugePages /proc/meminfo | tr -s ' '))"
  # AnonHugePages sampled every 5 s while the points run (after a stop it reads the freed memory)
  (while sleep 5; do echo "$(date +%T) $(cat $THP) $(grep AnonHugePages /proc/meminfo | tr -s ' ')"; done) \
    > "$RES/thp-meminfo.txt" 2>&1 & thp_pid=$!
  if [ "$was" != always ] && echo always > $THP 2>/dev/null; then
    echo "$was" > $THP
    ballast 16
    [ -n "${THP_BASE:-}" ] && kit k16-wna16-thp-$was 16 "$FULL" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8
    echo always > $THP
    kit k16-wna16-thp-always 16 "$FULL" -- $KITG --kt-method AMXINT8 --kt-weight-path $KT8
    echo "$was" > $THP
  else
    step "THP stays '$was': $THP is not writable here (or already always)"
  fi
  kill $thp_pid 2>/dev/null
fi
if has kthreads; then  # the estimate's thread term at kernel level (its AMXINT8 misses: held-out server runs at 6 KT
  # threads decoded 1.0-1.7x the estimate, which prices CPU experts by the host read rate at the thread count):
  # kt-kernel's own CPU-expert time per token at 6, 10 and 14 threads, the idle machine's last step (~3 min)
  ballast_off
  # one process per method and thread count: kt-kernel 0.5.1 aborted ("corrupted double-linked list") creating a third
  # method's pool in one process on 2026-11-27 (sixth session)
  for t in 14 10 6; do for m in AMXINT8 AMXINT4 FP8; do
    timeout 300 python3 benchmarks/gpu/kt_decode_bench.py --methods $m --threads $t --tokens 16 --prefill 0 \
      --gpu-experts 43 --out "$RES/kt-threads-$m-t$t.json" > "$RES/logs/kt-threads-$m-t$t.txt" 2>&1
  done; done
  step "kernel level by threads: $(python3 -c "import json, glob; print('; '.join(f\"{r['method']} t{r['threads']} \
{r.get('cpu_ms_per_token_median')} ms\" for f in sorted(glob.glob('$RES/kt-threads-*.json')) for r in json.load(open(f))['runs']))" 2>&1 | tail -c 600)"
fi
ballast_off
# the machine's sweep again, its servers stopped, each count's best of HOST_ROUNDS rounds (~40 s): an idle machine's
# one-round readings fell in two modes a third apart (membw-noise/h200.json; fit_kt.py's host-read section reads every
# sweep of the session)
python3 -c "import json; from vramkit.adapters import membw
print(json.dumps(membw.sweep([4, 8, 12, $THREADS, $PHYS], 4 << 30, rounds=membw.HOST_ROUNDS)))" > "$RES/membw-session-end.json" \
  2> "$RES/logs/membw-session-end.err"
pack
step "DONE ($(elapsed) s)"
