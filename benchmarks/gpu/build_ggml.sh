#!/usr/bin/env bash
# llama.cpp's ggml quantizers for the accuracy proxy (benchmarks/gpu/ggml_quant.py, kt_accuracy.py --ggml-layouts),
# built on a CPU from the llama.cpp source that llama-cpp-python's sdist vendors (the same source as the GPU
# host's llama-bench / llama-server: stage_llama_src.sh).
#   bash benchmarks/gpu/build_ggml.sh DIR            # DIR/lib/libggml-base.so (~15 s on 2 cores)
#   bash benchmarks/gpu/build_ggml.sh DIR cpu        # DIR/lib-native/: libggml-base + libggml-cpu built for THIS CPU
#                                                    # (GGML_NATIVE, as llama.cpp builds itself), for ggml_moe_bench.py,
#                                                    # and libvramkit_ggml_experts.so (the kit's ggml CPU experts)
#   bash benchmarks/gpu/build_ggml.sh DIR check      # + llama-quantize (minutes), then checks that the Q4_K_M types
#                                                    # ggml_quant.py and make_random_gguf.py give each tensor are
#                                                    # the ones the real llama-quantize gives (DIR/check.txt)
# STAGE=.stage-w16 reuses a staged llama-src.tar.xz instead of downloading the sdist.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${1:?usage: build_ggml.sh DIR [check]}
MODE=${2:-}
PY=${PY:-.venv/bin/python}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [ ! -d "$DIR/llama.cpp" ]; then
  if [ -n "${STAGE:-}" ] && [ -f "$STAGE/llama-src.tar.xz" ]; then
    tar -xJf "$STAGE/llama-src.tar.xz" -C "$DIR"
  else
    bash benchmarks/gpu/stage_llama_src.sh "$DIR/stage" && tar -xJf "$DIR/stage/llama-src.tar.xz" -C "$DIR"
  fi
fi
if [ "$MODE" = cpu ]; then    # the CPU backend as llama.cpp's own build has it: native ISA, its repack and AMX kernels
  cmake -S "$DIR/llama.cpp" -B "$DIR/build-native" -G Ninja -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF > "$DIR/cmake-native.log" 2>&1 \
    || { tail -20 "$DIR/cmake-native.log"; exit 1; }
  nice ninja -C "$DIR/build-native" ggml-base ggml-cpu > "$DIR/ninja-native.log" 2>&1 || { tail -20 "$DIR/ninja-native.log"; exit 1; }
  mkdir -p "$DIR/lib-native" && cp -L "$DIR"/build-native/bin/libggml-{base,cpu}.so "$DIR/lib-native/"
  for l in base cpu; do ln -sf "libggml-$l.so" "$DIR/lib-native/libggml-$l.so.0"; done    # their sonames
  # the kit's ggml CPU-expert shim (services/sglang-kt/kt_compat/ggml_experts.c), beside the libraries it links
  cc -O2 -Wall -shared -fPIC services/sglang-kt/kt_compat/ggml_experts.c -I "$DIR/llama.cpp/ggml/include" \
    -L "$DIR/lib-native" -lggml-base -lggml-cpu -Wl,-rpath,'$ORIGIN' -o "$DIR/lib-native/libvramkit_ggml_experts.so"
  echo "$DIR/lib-native"
  exit 0
fi
targets=ggml-base
[ "$MODE" = check ] && targets="ggml-base llama-quantize"
cmake -S "$DIR/llama.cpp" -B "$DIR/build" -G Ninja -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_TYPE=Release \
  -DGGML_CUDA=OFF -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF > "$DIR/cmake.log" 2>&1 \
  || { tail -20 "$DIR/cmake.log"; exit 1; }
# shellcheck disable=SC2086
nice ninja -C "$DIR/build" $targets > "$DIR/ninja.log" 2>&1 || { tail -20 "$DIR/ninja.log"; exit 1; }
mkdir -p "$DIR/lib" && cp -L "$DIR/build/bin/libggml-base.so" "$DIR/lib/"
echo "$DIR/lib/libggml-base.so"
[ "$MODE" = check ] || exit 0

# A 48-layer qwen3moe of tiny width (the types depend on names, layer index and row length, not on size), written
# Q4_K_M-typed by make_random_gguf.py, re-quantized by the real llama-quantize, and the two files' types compared.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" - "$tmp" <<'PY'
import json, sys
from pathlib import Path
cfg = json.loads(Path("config/models/qwen3-coder-30b-a3b-instruct/config.json").read_text())
cfg.update(hidden_size=256, intermediate_size=256, moe_intermediate_size=256, num_experts=16, num_experts_per_tok=2,
           num_attention_heads=2, num_key_value_heads=1, head_dim=128, vocab_size=512, num_hidden_layers=48)
(Path(sys.argv[1]) / "tiny").mkdir()
(Path(sys.argv[1]) / "tiny" / "config.json").write_text(json.dumps(cfg))
PY
"$PY" tools/make_random_gguf.py "$tmp/tiny" "$tmp/ours.gguf" --type Q4_K_M > /dev/null
LD_LIBRARY_PATH="$DIR/build/bin" "$DIR/build/bin/llama-quantize" --allow-requantize "$tmp/ours.gguf" \
  "$tmp/theirs.gguf" Q4_K_M > "$DIR/quantize.log" 2>&1 || { tail -20 "$DIR/quantize.log"; exit 1; }
{ echo "llama.cpp as llama-cpp-python 0.3.36 vendors it ($(grep -o 'ggml version: .*' "$DIR/cmake.log")), $(date -u +%F)"
"$PY" - "$tmp/ours.gguf" "$tmp/theirs.gguf" <<'PY'; } | tee "$DIR/check.txt"
import sys
from gguf import GGUFReader
ours, theirs = ({t.name: t.tensor_type.name for t in GGUFReader(f).tensors} for f in sys.argv[1:3])
sys.path.insert(0, "benchmarks/gpu")
from ggml_quant import expert_types
differ = {n: (ours[n], theirs.get(n)) for n in ours if ours[n] != theirs.get(n)}
for n, t in theirs.items():      # the experts' types kt_accuracy.py --ggml-layouts Q4_K_M quantizes with
    part = n.split(".")
    if len(part) == 4 and part[2] in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
        mine = expert_types("Q4_K_M", int(part[1]), 48)[part[2].split("_")[1]]
        if mine != t:
            differ[n + " (ggml_quant.py)"] = (mine, t)
kinds = sorted({(n.split(".")[-2] if n.startswith("blk.") else n, t) for n, t in theirs.items()})
print(f"llama-quantize Q4_K_M on a 48-layer qwen3moe: {len(theirs)} tensors; types: {kinds}")
print("differ from make_random_gguf.py / ggml_quant.py:", differ or "none")
sys.exit(1 if differ else 0)
PY
