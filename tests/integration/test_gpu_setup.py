"""The GPU path's set-up, for real up to the hardware: `make setup-gpu` (scripts/setup_gpu.sh), `make test-gpu`
and the CPU torch of `make setup` (scripts/install_cpu_torch.sh).

The only fake is the hardware boundary: an `nvidia-smi` placed first on PATH that answers as a GPU host's
would (a GPU and its driver, or a driver that is not loaded). Everything else is the real script, make,
pytest and pip. Issue 10, item 5: before, nothing installed SGLang for RUNTIME=native, `make test-gpu`
skipped everything and exited 0 on a GPU host, and `make setup` died without a local CPU torch wheel.
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP_GPU = REPO / "scripts" / "setup_gpu.sh"
INSTALL_TORCH = REPO / "scripts" / "install_cpu_torch.sh"
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
H100 = "0, NVIDIA H100 80GB HBM3, 580.65.06"


def _no_real_gpu() -> bool:
    # tests/gpu/conftest.py by its path: `import conftest` may find tests/conftest.py (the suite's, loaded first)
    from repo_modules import load_module
    gpu_conftest = load_module("tests/gpu/conftest.py", "gpu_conftest")
    return gpu_conftest.nvidia_gpu_evidence() is None


needs_no_gpu = pytest.mark.skipif(not _no_real_gpu(), reason="this machine has an NVIDIA GPU; these tests fake one")


def fake_nvidia_smi(bin_dir: Path, query_line: str | None, fail: str | None = None) -> Path:
    """An nvidia-smi answering --query-gpu with `query_line` and -L with the GPU's name, or failing the
    way it does when the driver is not loaded."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    if fail:
        body = f'echo "{fail}"; exit 9\n'
    else:
        index, name, _driver = (x.strip() for x in query_line.split(","))
        body = (f'case "$*" in *-L*) echo "GPU {index}: {name} (UUID: GPU-00000000-fake)";; '
                f'*) echo "{query_line}";; esac\n')
    smi.write_text("#!/bin/sh\n" + body)
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return smi


def env_with(path_prefix: Path | None = None, **extra) -> dict:
    # MAKELEVEL/MAKEFLAGS: under `make test` a nested make would print "make[1]: Leaving directory" last
    env = {k: v for k, v in os.environ.items()
           if k not in ("VRAMKIT_GPU_TESTS", "GPU_VENV", "VRAMKIT_SERVER_PYTHON", "MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    env["PATH"] = (f"{path_prefix}:" if path_prefix else "") + BASE_PATH
    env.update(extra)
    return env


def run(cmd: list[str], env: dict, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def one_line(stderr: str, prefix: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(prefix) and " -> " in lines[0], lines[0]
    return lines[0]


# ---- make setup-gpu ------------------------------------------------------------------------------------------

@needs_no_gpu
def test_setup_gpu_without_a_driver_refuses_with_11_and_creates_nothing(tmp_path):
    venv = tmp_path / "venv-gpu"
    r = run([str(SETUP_GPU), str(venv)], env_with())
    assert r.returncode == 11
    line = one_line(r.stderr, "setup-gpu: no NVIDIA driver here (nvidia-smi is not on PATH)")
    assert "run make setup-gpu on the GPU host" in line
    assert not venv.exists()
    r = run(["make", "setup-gpu", f"GPU_VENV={venv}"], env_with())      # make: its own 2, our line above it
    assert r.returncode == 2 and "Error 11" in r.stderr and not venv.exists()


def test_setup_gpu_with_the_driver_not_loaded_refuses_with_11(tmp_path):
    smi_dir = tmp_path / "bin"
    fake_nvidia_smi(smi_dir, None, fail="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    r = run([str(SETUP_GPU), str(tmp_path / "v")], env_with(smi_dir))
    assert r.returncode == 11
    one_line(r.stderr, "setup-gpu: nvidia-smi cannot talk to the driver: NVIDIA-SMI has failed")
    assert not (tmp_path / "v").exists()


def test_setup_gpu_with_a_driver_too_old_for_cuda_13_refuses_with_24(tmp_path):
    smi_dir = tmp_path / "bin"
    fake_nvidia_smi(smi_dir, "0, NVIDIA GeForce RTX 4080, 550.54.14")
    r = run([str(SETUP_GPU), str(tmp_path / "v")], env_with(smi_dir))
    assert r.returncode == 24
    line = one_line(r.stderr, "setup-gpu: NVIDIA driver 550.54.14 is older than 580")
    assert "RUNTIME=docker" in line and not (tmp_path / "v").exists()


def test_setup_gpu_check_names_the_pinned_sglang_and_installs_nothing(tmp_path):
    import tomllib
    pin = tomllib.loads((REPO / "config" / "versions.toml").read_text())["sglang_pip"]
    smi_dir = tmp_path / "bin"
    fake_nvidia_smi(smi_dir, H100)
    venv = tmp_path / "venv-gpu"
    r = run([str(SETUP_GPU), str(venv), "--check"], env_with(smi_dir))
    assert r.returncode == 0, r.stderr
    assert f"sglang=={pin} and its CUDA torch into {venv}" in r.stderr
    assert "NVIDIA H100 80GB HBM3 (driver 580.65.06)" in r.stderr
    assert not venv.exists()
    r = run([str(SETUP_GPU), "--chek"], env_with(smi_dir))
    assert r.returncode == 64 and r.stderr.startswith("setup-gpu: unknown option --chek")


# ---- make test-gpu -------------------------------------------------------------------------------------------

@needs_no_gpu
def test_test_gpu_fails_on_a_gpu_host_whose_torch_cannot_see_the_gpu(tmp_path):
    """.venv's CPU torch on a machine where nvidia-smi lists a GPU: every GPU test fails with the fix."""
    smi_dir = tmp_path / "bin"
    fake_nvidia_smi(smi_dir, H100)
    r = run(["make", "test-gpu", f"GPU_VENV={tmp_path / 'none'}"], env_with(smi_dir), timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    summary = [ln for ln in r.stdout.splitlines() if re.search(r" in [\d.]+s$", ln)][-1]   # pytest's last line
    assert re.search(r"\b6 errors?\b", summary) and "skipped" not in summary, out[-2000:]   # the 6 torch tests
    assert "this machine has an NVIDIA GPU (nvidia-smi -L: GPU 0: NVIDIA H100 80GB HBM3" in out
    assert "cannot see it -> make setup-gpu, then make test-gpu" in out


@needs_no_gpu
def test_test_gpu_skips_with_the_reason_where_there_is_no_gpu(tmp_path):
    r = run(["make", "test-gpu", f"GPU_VENV={tmp_path / 'none'}"], env_with(), timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    summary = out.strip().splitlines()[-1]
    collected = len(re.findall(r"^def test_", "".join(p.read_text() for p in (REPO / "tests" / "gpu").glob("test_*.py")),
                               re.M))
    assert re.fullmatch(rf"{collected} skipped in [\d.]+s", summary), out[-2000:]   # every GPU test, none run
    assert "no NVIDIA GPU on this machine" in out


# ---- make setup's CPU torch ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pristine_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("pristine") / "venv"
    subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True, timeout=120)
    return venv


@pytest.fixture
def fresh_venv(tmp_path, pristine_venv) -> Path:
    """A new virtualenv with only pip: a copy of one made once per module (`python -m venv` installs pip, ~3 s)."""
    venv = tmp_path / "venv"
    shutil.copytree(pristine_venv, venv, symlinks=True)
    return venv


def fresh_machine_env(index_url: str) -> dict:
    """No local wheel anywhere: pip's config files and PIP_FIND_LINKS gone, as on a fresh machine."""
    env = env_with(PIP_CONFIG_FILE=os.devnull, TORCH_CPU_INDEX=index_url)
    env.pop("PIP_FIND_LINKS", None)
    return env


def local_cpu_index(tmp_path: Path) -> str:
    """A PEP 503 index standing in for download.pytorch.org/whl/cpu (no network here). It serves a wheel with the
    local CPU wheel's file name, tags and metadata (its Requires-Dist, which --with-deps installs, are two of
    torch's own) around a two-file torch package: what the script decides and pip does are the same as with
    the 190 MB wheel, whose unpacking made this the suite's slowest test (`make setup` installs the real one)."""
    wheels = sorted(Path("/opt/wheels").glob("torch-*+cpu-*.whl"))
    if not wheels:
        pytest.skip("no local CPU torch wheel to serve from a stand-in CPU index")
    real = wheels[-1]
    (tmp_path / "idx" / "torch").mkdir(parents=True)
    stand_in = tmp_path / "idx" / "torch" / real.name
    version = real.name.split("-")[1]
    with zipfile.ZipFile(real) as src, zipfile.ZipFile(stand_in, "w") as dst:
        info = next(n.split("/")[0] for n in src.namelist() if n.endswith(".dist-info/METADATA"))
        # torch's METADATA with its Requires-Dist cut to the two small ones: --with-deps still installs torch's
        # dependencies from the usual index around the +cpu build; sympy and networkx took 10 s of it
        meta = b"".join(line for line in src.read(f"{info}/METADATA").splitlines(keepends=True)
                        if not line.startswith(b"Requires-Dist:") or line.split()[1].startswith(
                            (b"filelock", b"typing-extensions")))
        files = {f"{info}/METADATA": meta, f"{info}/WHEEL": src.read(f"{info}/WHEEL"),
                 "torch/__init__.py": f"__version__ = {version!r}\nfrom torch import version\n".encode(),
                 "torch/version.py": f"__version__ = {version!r}\ncuda = None\n".encode()}
        record = "".join(f"{n},sha256={_digest(b)},{len(b)}\n" for n, b in files.items()) + f"{info}/RECORD,,\n"
        for name, body in [*files.items(), (f"{info}/RECORD", record.encode())]:
            dst.writestr(name, body)
    (tmp_path / "idx" / "torch" / "index.html").write_text(f'<a href="{stand_in.name}">{stand_in.name}</a>\n')
    return (tmp_path / "idx").as_uri()


def _digest(body: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()


@pytest.mark.slow
def test_cpu_torch_without_a_local_wheel_comes_from_the_cpu_index(tmp_path, fresh_venv):
    venv = fresh_venv
    # PIP_NO_COMPILE: pip leaves out the .pyc files of torch's dependencies (sympy alone: seconds); what is
    # installed, from where, and what imports are unchanged
    r = run([str(INSTALL_TORCH), str(venv)], fresh_machine_env(local_cpu_index(tmp_path)) | {"PIP_NO_COMPILE": "1"},
            timeout=600)
    assert r.returncode == 0, r.stderr
    assert "no local CPU wheel of torch" in r.stderr and "torch 2.13.0+cpu from file://" in r.stderr
    # make install's second half: torch's own dependencies from the usual index (this machine's mirror); the
    # +cpu build stays (the stand-in still imports: a torch pip put in its place would import as another build)
    r = run([str(INSTALL_TORCH), str(venv), "--with-deps"], env_with(PIP_NO_COMPILE="1"), timeout=600)
    assert r.returncode == 0, r.stderr
    assert "torch 2.13.0+cpu already in" in r.stderr
    probe = run([str(venv / "bin" / "python"), "-c",
                 "import torch, filelock, typing_extensions; print(torch.__version__, torch.version.cuda)"], env_with())
    assert probe.stdout.split() == ["2.13.0+cpu", "None"], probe.stderr


def test_cpu_torch_nowhere_fails_in_one_line(tmp_path, fresh_venv):
    venv = fresh_venv
    (tmp_path / "empty").mkdir()
    r = run([str(INSTALL_TORCH), str(venv)], fresh_machine_env((tmp_path / "empty").as_uri()))
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1].startswith("install-cpu-torch: torch 2.13.0+cpu is neither in a local wheel "
                                                "nor on file://")


def test_the_cpu_torch_pin_lives_only_in_versions_toml():
    import tomllib
    pin = tomllib.loads((REPO / "config" / "versions.toml").read_text())["torch_cpu"]
    places = [p for p in [*(REPO / "mk").glob("*.mk"), *(REPO / "scripts").iterdir(), REPO / "Makefile"]
              if p.is_file() and pin in p.read_text()]
    assert places == []
    for user in (REPO / "mk" / "core.mk", REPO / "scripts" / "setup_sglang_check.sh"):
        assert "install_cpu_torch.sh" in user.read_text()
