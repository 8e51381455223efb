#!/usr/bin/env bash
# `make setup-gpu`, on a GPU host: the virtualenv RUNTIME=native starts SGLang from (.venv-gpu). It holds the
# pinned SGLang (sglang_pip in config/versions.toml) with the CUDA torch that release pins, plus the kit's
# own dependencies and pytest, so `make test-gpu` runs there too. `vramkit up --runtime native` starts
# SGLang with VENV_DIR/bin/python (VRAMKIT_SERVER_PYTHON / make SERVER_PYTHON=... choose another).
#
# Checks before creating anything; a refusal is one line and its own exit code (vramkit/errors.py):
#   11  no NVIDIA GPU here: nvidia-smi is missing, cannot talk to the driver, or lists no GPU
#   24  the driver is older than sglang_pip_min_driver (the pip wheel's CUDA 13 needs >= 580), or, after
#       installing, torch cannot see the GPU
#   64  bad arguments, or the base Python is older than 3.11 (the kit's floor; SGLang's is 3.10)
#    1  pip failed (its own output above the line)
# Idempotent: a stamp of the inputs makes a second run a quick check.
# Usage: scripts/setup_gpu.sh [VENV_DIR] [--check]   --check: the checks and what it would install, then stop
# Env: GPU_PYTHON (base interpreter >= 3.11, default python3); pip's own PIP_INDEX_URL / PIP_FIND_LINKS for a mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-gpu
check_only=0
for arg in "$@"; do
    case $arg in
        --check) check_only=1 ;;
        -*) printf 'setup-gpu: unknown option %s -> usage: scripts/setup_gpu.sh [VENV_DIR] [--check]\n' "$arg" >&2; exit 64 ;;
        *) venv=$arg ;;
    esac
done
base_python=${GPU_PYTHON:-python3}

say() { printf 'setup-gpu: %s\n' "$*" >&2; }
refuse() { say "$2 -> $3"; exit "$1"; }

# 1. an NVIDIA GPU and a driver new enough for the wheel's CUDA
command -v nvidia-smi >/dev/null \
    || refuse 11 "no NVIDIA driver here (nvidia-smi is not on PATH)" \
              "run make setup-gpu on the GPU host; here, make setup (CPU only) and vramkit plan work"
if ! gpus=$(nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1); then
    refuse 11 "nvidia-smi cannot talk to the driver: $(head -n1 <<<"$gpus")" \
              "load the NVIDIA driver (nvidia-smi must list the GPU), then run make setup-gpu again"
fi
gpus=$(grep -E '^[0-9]+, ' <<<"$gpus" || true)
[[ -n $gpus ]] || refuse 11 "nvidia-smi lists no GPU" "check the card, the driver and CUDA_VISIBLE_DEVICES / the container's --gpus"
first=$(head -n1 <<<"$gpus")
driver=${first##*, }
name=${first#*, }; name=${name%, *}
command -v "$base_python" >/dev/null || refuse 64 "no $base_python" "install Python >= 3.11 or set GPU_PYTHON"
read -r sglang_pip min_driver < <("$base_python" - 2>/dev/null <<'PY'
import tomllib
with open("config/versions.toml", "rb") as f:
    v = tomllib.load(f)
print(v["sglang_pip"], v["sglang_pip_min_driver"])
PY
) || refuse 64 "$base_python cannot read config/versions.toml (tomllib needs Python >= 3.11)" "set GPU_PYTHON to python3.11 or newer"
[[ ${driver%%.*} =~ ^[0-9]+$ ]] || refuse 11 "nvidia-smi reports no driver version ('$driver')" "check the driver with nvidia-smi"
(( ${driver%%.*} >= min_driver )) \
    || refuse 24 "NVIDIA driver $driver is older than $min_driver, which sglang $sglang_pip's pip wheel (CUDA 13) needs" \
              "update the driver, or use RUNTIME=docker (its -cu129 image runs on drivers >= 575)"
ngpu=$(wc -l <<<"$gpus")
say "$ngpu GPU(s), first: $name (driver $driver); sglang==$sglang_pip and its CUDA torch into $venv with $("$base_python" -V 2>&1)"
if (( check_only )); then
    say "--check: nothing installed"
    exit 0
fi

# 2. install: SGLang with its own pins (its CUDA torch), the kit's dependencies, what tests/gpu needs and pytest,
#    in one resolve
mapfile -t kit_deps < <("$base_python" - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    p = tomllib.load(f)["project"]
extras = p["optional-dependencies"]
# the kit itself, what tests/gpu imports (the dashboard's metrics and live panel) and pytest
print("\n".join(p["dependencies"] + extras.get("dashboard", []) + extras["test"]))
PY
)
stamp=$( { echo "$sglang_pip"; printf '%s\n' "${kit_deps[@]}"; "$base_python" -VV; cat "$0"; } | sha256sum | cut -d' ' -f1)
stamp_file="$venv/.vramkit-setup-stamp"
if ! [[ -x $venv/bin/python && -f $stamp_file && $(cat "$stamp_file") == "$stamp" ]]; then
    [[ -x $venv/bin/python ]] || { say "creating $venv with $base_python"; "$base_python" -m venv "$venv"; }
    rm -f "$stamp_file"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q "sglang==$sglang_pip" "${kit_deps[@]}" \
        || refuse 1 "pip could not install sglang==$sglang_pip into $venv" "read pip's message above; a mirror: PIP_INDEX_URL=..."
fi

# 3. prove it: a CUDA torch that sees the GPU, and the pinned SGLang
set +e
"$venv/bin/python" -W ignore - "$sglang_pip" <<'PY'
import sys
import torch
if torch.version.cuda is None or not torch.cuda.is_available():
    print(f"setup-gpu: torch {torch.__version__} in {sys.prefix} cannot see the GPU nvidia-smi lists "
          f"(CUDA build: {torch.version.cuda}) -> check the driver against CUDA {torch.version.cuda or '?'}, "
          "or rm -rf the venv and run make setup-gpu again", file=sys.stderr)
    sys.exit(24)
import sglang
if sglang.__version__ != sys.argv[1]:
    print(f"setup-gpu: sglang {sglang.__version__} is installed, not {sys.argv[1]} -> rm -rf {sys.prefix} and "
          "run make setup-gpu again", file=sys.stderr)
    sys.exit(1)
print(f"setup-gpu: sglang {sglang.__version__} on torch {torch.__version__} (CUDA {torch.version.cuda}) "
      f"sees {torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}", file=sys.stderr)
PY
rc=$?
set -e
(( rc == 0 )) || exit "$rc"
echo "$stamp" > "$stamp_file"
say "done: RUNTIME=native make start-qwen-optimized now starts SGLang with $venv/bin/python"
