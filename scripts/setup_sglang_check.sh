#!/usr/bin/env bash
# Builds .venv-sglang: SGLang (pip version from config/versions.toml) on a CPU torch, just enough of it to run
# its argument parser, ServerArgs(device="cpu") and ModelConfig offline. vramkit's flag checker
# (vramkit/adapters/sglang_check.py) runs there; the main .venv never imports SGLang.
#
# Never a CUDA torch: torch (torch_cpu in config/versions.toml) comes from scripts/install_cpu_torch.sh: a
# local wheel (pip's find-links, /opt/wheels here), else PyTorch's CPU index as the only index; everything
# else is installed with --no-deps from requirements/sglang-check.txt, and the result is checked.
# Idempotent: a stamp of the inputs makes a second run a no-op (~1 s); changed inputs reinstall in place.
# Usage: scripts/setup_sglang_check.sh [VENV_DIR]        (env: SGLANG_CHECK_PYTHON, the base interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-sglang}
base_python=${SGLANG_CHECK_PYTHON:-python3.11}
reqs=requirements/sglang-check.txt
standin=tools/torchvision_standin/torchvision
start=$SECONDS

say() { printf 'setup-sglang-check: %s\n' "$*" >&2; }
die() { say "$1 -> $2"; exit 1; }
# pip, without this machine's "Location file:///... is ignored" noise; keeps pip's exit status
# pip's stderr through a filter in the same pipeline (not a process substitution, which the shell does not
# wait for): whatever pip says is printed before the script's own last line; pip's exit status is kept
pip_q() { { "$venv/bin/python" -m pip --disable-pip-version-check "$@" 2>&1 1>&3 3>&- |
          { grep -v "is ignored: it is neither" || true; } >&2; } 3>&1; }

command -v "$base_python" >/dev/null || die "no $base_python" "install Python 3.11 (the local CPU torch wheel is cp311) or set SGLANG_CHECK_PYTHON"
read -r sglang_pip torch_version < <("$base_python" - <<'EOF'
import tomllib
with open("config/versions.toml", "rb") as f:
    v = tomllib.load(f)
print(v["sglang_pip"], v["torch_cpu"])
EOF
)

stamp_file="$venv/.vramkit-setup-stamp"
stamp=$( { echo "$sglang_pip torch=$torch_version"; "$base_python" -VV; cat "$reqs" "$0" scripts/install_cpu_torch.sh;
           find "$standin" -name '*.py' | sort | xargs cat; } | sha256sum | cut -d' ' -f1)
if [[ -x $venv/bin/python && -f $stamp_file && $(cat "$stamp_file") == "$stamp" ]] \
   && "$venv/bin/python" -I -c 'import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in ("sglang", "torch", "transformers", "triton", "torchvision")))' 2>/dev/null; then
    say "$venv is up to date (sglang $sglang_pip, torch $torch_version+cpu)"
    exit 0
fi

if ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
    say "creating $venv with $base_python"
    rm -rf "$venv"
    "$base_python" -m venv "$venv"
fi
rm -f "$stamp_file"

# 1. torch first, CPU build only (a local wheel, else PyTorch's CPU index; never PyPI's CUDA build)
scripts/install_cpu_torch.sh "$venv" || exit 1

# 2. SGLang without its dependencies (they include CUDA torch 2.11.0, flashinfer, ...), then what its imports need
say "installing sglang $sglang_pip (--no-deps) and $(grep -c '^[A-Za-z]' "$reqs") pinned packages from $reqs"
pip_q install -q --no-deps "sglang==$sglang_pip" -r "$reqs"

# 3. the torchvision stand-in, copied in with no dist-info (see its docstring)
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [[ -d $site/torchvision && ! -f $site/torchvision/.vramkit-standin ]] || compgen -G "$site/torchvision-*.dist-info" >/dev/null; then
    die "a real torchvision is installed in $venv" "rm -rf $venv and run make setup-sglang-check again"
fi
rm -rf "$site/torchvision"
cp -r "$standin" "$site/torchvision"
touch "$site/torchvision/.vramkit-standin"

# 4. prove it: CPU torch, no CUDA wheels, SGLang's parser and ModelConfig import
"$venv/bin/python" -I -W ignore - "$sglang_pip" <<'EOF'
import importlib.metadata as md, sys, time
import torch
assert torch.version.cuda is None and torch.__version__.endswith("+cpu"), f"not a CPU torch: {torch.__version__}"
cuda = sorted(d.metadata["Name"] for d in md.distributions() if d.metadata["Name"].lower().startswith(("nvidia-", "cuda-")))
assert not cuda, f"CUDA packages in the checking environment: {cuda}"
t = time.monotonic()
import sglang
from sglang.srt.server_args import ServerArgs
from sglang.srt.configs.model_config import ModelConfig
assert sglang.__version__ == sys.argv[1], (sglang.__version__, sys.argv[1])
print(f"setup-sglang-check: sglang {sglang.__version__} imports on torch {torch.__version__} "
      f"in {time.monotonic() - t:.1f} s", file=sys.stderr)
EOF

echo "$stamp" > "$stamp_file"
say "done in $((SECONDS - start)) s"
