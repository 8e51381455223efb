#!/usr/bin/env bash
# Installs the CPU build of torch (version: torch_cpu in config/versions.toml) into a venv and proves it is a
# CPU build. Used by `make install` (.venv) and setup_sglang_check.sh (.venv-sglang): neither may ever get a
# CUDA torch (several GB, and nothing here needs a GPU).
#
# Where from, in this order:
#   1. a local wheel, through pip's find-links (PIP_FIND_LINKS / pip.conf; /opt/wheels on the dev machines):
#      --no-index, so nothing is downloaded;
#   2. PyTorch's CPU index (torch_cpu_index in versions.toml; env TORCH_CPU_INDEX overrides it, e.g. a
#      mirror) via --index-url, asking for torch==VERSION+cpu: no CUDA build can match that pin.
# torch goes in with --no-deps. --with-deps then adds its own dependencies (filelock, sympy, ...) from the
# usual index: torch is already satisfied by the +cpu build, so nothing replaces it (make install wants this;
# the checker installs its own pinned list instead). A torch already there at VERSION+cpu is kept.
# Exit 0 done, 1 failed (one line on stderr, after pip's own message).
# Usage: scripts/install_cpu_torch.sh VENV_DIR [--with-deps]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:?usage: scripts/install_cpu_torch.sh VENV_DIR [--with-deps]}
with_deps=0
[[ ${2:-} == --with-deps ]] && with_deps=1
py="$venv/bin/python"

say() { printf 'install-cpu-torch: %s\n' "$*" >&2; }
die() { say "$1 -> $2"; exit 1; }
# pip's stderr through a filter in the same pipeline (not a process substitution, which the shell does not
# wait for): whatever pip says is printed before the script's own last line; pip's exit status is kept
pip_q() { { "$py" -m pip --disable-pip-version-check -q "$@" 2>&1 1>&3 3>&- |
          { grep -v "is ignored: it is neither" || true; } >&2; } 3>&1; }
deps() {
    (( with_deps )) || return 0
    pip_q install "torch==$version" || die "torch's dependencies did not install into $venv" "read pip's message above"
}

[[ -x $py ]] || die "no virtualenv at $venv" "create it first (python3 -m venv $venv)"
read -r version index < <("$py" - <<'PY'
import tomllib
with open("config/versions.toml", "rb") as f:
    v = tomllib.load(f)
print(v["torch_cpu"], v["torch_cpu_index"])
PY
)
index=${TORCH_CPU_INDEX:-$index}

# torch's version from its metadata: importing it needs its dependencies, which come later (make install)
# or never (.venv-sglang installs its own pinned list)
installed() { "$py" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true; }
have=$(installed)
if [[ $have == "$version+cpu" ]]; then
    say "torch $have already in $venv"
    deps
    exit 0
fi

if pip_q install --no-deps --no-index "torch==$version" 2>/dev/null; then
    from="a local wheel (pip find-links)"
else
    say "no local CPU wheel of torch $version for $("$py" -V); trying PyTorch's CPU index $index"
    # +cpu in the pin: only a CPU build can match it (PyPI never carries local versions like +cpu)
    pip_q install --no-deps --index-url "$index" "torch==$version+cpu" \
        || die "torch $version+cpu is neither in a local wheel nor on $index" \
               "put torch-$version+cpu-*.whl in a folder named by PIP_FIND_LINKS, or set TORCH_CPU_INDEX to a reachable mirror"
    from="$index"
fi
got=$(installed)
[[ $got == "$version+cpu" ]] \
    || die "installed torch is '$got', not the CPU build $version+cpu" "rm -rf $venv; never install torch from PyPI here"
say "torch $version+cpu from $from"
deps
