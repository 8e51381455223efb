#!/usr/bin/env bash
# Stage llama.cpp's source for run_moe_vs_llamacpp.sh (the GPU host has no network): the copy that the
# llama-cpp-python sdist on the package index vendors, trimmed to what a CUDA build of llama-bench and
# llama-server reads (no model vocabularies, docs, tests, web UI or other GPU backends), packed as
# STAGE/llama-src.tar.xz (~5 MB; the device call carries at most 64 MiB).
#   bash benchmarks/gpu/stage_llama_src.sh .stage-thr [0.3.36]
# Check here that the trimmed tree still configures (CPU only): CHECK=1 bash benchmarks/gpu/stage_llama_src.sh DIR
set -euo pipefail
STAGE=${1:?usage: stage_llama_src.sh STAGE_DIR [llama-cpp-python version]}
VER=${2:-0.3.36}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VER" -d "$tmp"
tar -xzf "$tmp"/llama_cpp_python-"$VER".tar.gz -C "$tmp"
src=$tmp/llama_cpp_python-$VER/vendor/llama.cpp
rm -rf "$src"/{models,docs,tests,media,benches,examples,pocs,gguf-py,conversion,app,.github}
# the web UI's assets and miniaudio's sources (mtmd's audio): their folders stay (CMake adds them), emptied
find "$src"/tools/ui "$src"/vendor/miniaudio -type f \( -name '*.js' -o -name '*.ts' -o -name '*.svelte' -o -name '*.png' \
  -o -name '*.ico' -o -name '*.woff*' -o -name '*.gz' \) -delete 2>/dev/null || true
for b in "$src"/ggml/src/ggml-*/; do
  case "$(basename "$b")" in ggml-cpu|ggml-cuda|ggml-blas) ;; *) rm -rf "$b";; esac
done
mkdir -p "$src"/examples "$src"/tests && : > "$src"/examples/CMakeLists.txt && : > "$src"/tests/CMakeLists.txt
if [ -n "${CHECK:-}" ]; then
  cmake -S "$src" -B "$tmp/build" -G Ninja -DGGML_CUDA=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF > "$tmp/cmake.log" 2>&1 \
    || { tail -20 "$tmp/cmake.log"; exit 1; }
  echo "configures (CPU only): $(grep -c . "$tmp/cmake.log") lines of cmake output"
fi
mkdir -p "$STAGE"
mv "$src" "$tmp/llama.cpp"
tar -cJf "$STAGE/llama-src.tar.xz" -C "$tmp" llama.cpp
echo "$STAGE/llama-src.tar.xz: $(du -h "$STAGE/llama-src.tar.xz" | cut -f1) (llama-cpp-python $VER's llama.cpp)"
