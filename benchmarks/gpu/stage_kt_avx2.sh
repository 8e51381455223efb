#!/usr/bin/env bash
# Stage run_moe_vs_llamacpp.sh's avx2-070 step (the GPU host has no network; the device call carries at most 64 MiB):
# STAGE/kt/ gets kt-kernel 0.5.1 (config/versions.toml kt_kernel_pip) with only its amx extension and 0.7.0
# (kt_kernel_avx2_pip) with only its avx2 one, both cp312 (the host's Python), re-zipped without the other builds
# (pip installs a wheel whose RECORD names files it lacks); STAGE/whl/ gets gguf; STAGE/ballast.py the shared one.
#   bash benchmarks/gpu/stage_kt_avx2.sh .stage-070
set -euo pipefail
STAGE=${1:?usage: stage_kt_avx2.sh STAGE_DIR}
pin() { sed -n "s/^$1 = \"\(.*\)\"/\1/p" config/versions.toml; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$STAGE/kt" "$STAGE/whl"
dl() { python3 -m pip download -q --no-deps --only-binary :all: --python-version 3.12 --platform manylinux_2_35_x86_64 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 "$@" -d "$tmp"; }
dl "kt-kernel==$(pin kt_kernel_pip)"; dl "kt-kernel==$(pin kt_kernel_avx2_pip)"
python3 -m pip download -q --no-deps gguf==0.19.0 -d "$STAGE/whl"
python3 - "$tmp" "$STAGE/kt" "$(pin kt_kernel_pip)" "$(pin kt_kernel_avx2_pip)" <<'PY'
import pathlib, sys, zipfile
src, dst, keep = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), {sys.argv[3]: "amx", sys.argv[4]: "avx2"}
for whl in src.glob("kt_kernel-*.whl"):
    variant = keep[whl.name.split("-")[1]]
    with zipfile.ZipFile(whl) as z, zipfile.ZipFile(dst / whl.name, "w", zipfile.ZIP_DEFLATED) as o:
        for n in z.namelist():
            if "_kt_kernel_ext_" in n and f"_kt_kernel_ext_{variant}." not in n:
                continue
            o.writestr(z.getinfo(n), z.read(n))
    print(whl.name, f"{(dst / whl.name).stat().st_size / 2**20:.1f} MiB ({variant} build only)")
PY
cp ../shared/gpu/ballast.py "$STAGE/"
du -sh "$STAGE"
