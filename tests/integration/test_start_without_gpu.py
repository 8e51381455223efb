"""`make start-qwen-optimized` for real on a machine with no Docker engine and no GPU.

What a user on a laptop sees: the plan, the checks, then one `vramkit: ...` line naming what is
missing and a distinct exit code (12 no Docker, 11 no GPU), no traceback, nothing left behind.
Each run gets its own state folder and a port nothing listens on.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

from vramkit.adapters import docker, nvml
from vramkit.errors import Exit, VramkitError
from vramkit.launch import reference

REPO = Path(__file__).resolve().parents[2]
PY = REPO / ".venv" / "bin" / "python"


def _docker_engine_present() -> bool:
    try:
        docker.check_engine()
    except VramkitError:
        return False
    return True


def _gpu_present() -> bool:
    snap = nvml.read_snapshot(with_processes=False)
    return snap.unavailable is None and bool(snap.gpus)


pytestmark = [
    pytest.mark.skipif(not PY.exists(), reason=".venv/bin/python missing: run `make install`"),
    pytest.mark.skipif(_gpu_present(), reason="this machine has a GPU: these tests reproduce a machine without one"),
]
needs_no_docker = pytest.mark.skipif(_docker_engine_present(),
                                     reason="a Docker engine with the NVIDIA runtime answers here")

# knobs mk/qwen.mk reads from the environment; a developer's own settings must not leak in
MAKE_KNOBS = ("RUNTIME", "MODEL", "CARD", "PORT", "DRY_RUN", "LOAD_FORMAT", "MODEL_PATH", "TIMEOUT", "UP_ARGS",
              "SGLANG_EXTRA_ARGS", "GPUS", "SGLANG_PYTHON", "VRAMKIT_RUNTIME", "VRAMKIT_PORT", "VRAMKIT_DRY_RUN",
              "VRAMKIT_LOAD_FORMAT", "VRAMKIT_MODEL_PATH", "VRAMKIT_TIMEOUT", "VRAMKIT_GPUS", "VRAMKIT_SGLANG_EXTRA_ARGS",
              "VRAMKIT_SERVER_PYTHON", "SERVER_PYTHON", "GPU_VENV")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if k not in MAKE_KNOBS}
    e["VRAMKIT_STATE_DIR"] = str(tmp_path / "state")
    e["PORT"] = str(_free_port())
    # planned for the reference desktop's RAM: how much a busy test machine has free must not decide the plan
    e["UP_ARGS"] = f"--host-ram-gib {reference.HOST_RAM_GIB:g}"
    return e


def _run(cmd: list[str], env: dict, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, env={**env, **extra}, capture_output=True, text=True, timeout=120)


def _nothing_left(env: dict) -> None:
    state = Path(env["VRAMKIT_STATE_DIR"])
    assert not state.exists() or not any(state.iterdir()), sorted(p.name for p in state.iterdir())
    port_arg = f"--port {env['PORT']}"
    servers = [p.pid for p in psutil.process_iter(["cmdline"])
               if "sglang.launch_server" in " ".join(p.info["cmdline"] or ()) and port_arg in " ".join(p.info["cmdline"])]
    assert not servers


def _assert_one_line_failure(r: subprocess.CompletedProcess, missing: str) -> str:
    """The vramkit line is the last stderr line before make's own 'Error N'; returns it."""
    out = r.stdout + r.stderr
    assert "Traceback" not in out
    assert "FITS" in r.stdout and "KV pool" in r.stdout                     # the plan came first
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    vramkit_lines = [ln for ln in lines if ln.startswith("vramkit: ")]
    assert len(vramkit_lines) == 1, lines
    assert lines[-1] == vramkit_lines[0] or re.fullmatch(r"make(\[\d+\])?: \*\*\* \[.*\] Error \d+", lines[-1]), lines
    line = vramkit_lines[0]
    assert line.startswith(f"vramkit: not starting: {missing}: ") and " -> " in line
    return line


@needs_no_docker
def test_make_start_without_docker_exits_12(env):
    r = _run(["make", "start-qwen-optimized"], env)
    line = _assert_one_line_failure(r, "docker")
    assert "RUNTIME=native" in line
    # make exits 2 on any failing recipe; the recipe's own code is in make's last line
    assert r.returncode != 0
    assert r.stderr.rstrip().endswith(f"Error {int(Exit.NO_DOCKER)}")
    assert "vram-safe" not in r.stdout                                    # the guard did not run after a failure
    _nothing_left(env)


@needs_no_docker
def test_the_recipe_itself_exits_12(env):
    """What the make target runs (`make -n`), run directly: vramkit's own exit code reaches the caller."""
    r = _run([str(PY), "-m", "vramkit", "up", "--preset", "optimized", "--name", "vramkit-optimized",
              *env["UP_ARGS"].split()], env,
             RUNTIME="docker")
    assert r.returncode == Exit.NO_DOCKER == 12
    assert r.stderr.strip().splitlines()[-1].startswith("vramkit: not starting: docker: ")
    assert "Traceback" not in r.stdout + r.stderr
    _nothing_left(env)


def test_make_start_native_without_gpu_exits_11(env):
    r = _run(["make", "start-qwen-optimized"], env, RUNTIME="native")
    line = _assert_one_line_failure(r, "gpu")
    assert "no NVIDIA GPU visible" in line and "`vramkit plan` works anywhere" in line
    assert r.returncode != 0
    assert r.stderr.rstrip().endswith(f"Error {int(Exit.NO_GPU)}")
    r2 = _run([str(PY), "-m", "vramkit", "up", "--preset", "optimized", "--name", "vramkit-optimized",
              *env["UP_ARGS"].split()], env,
              RUNTIME="native")
    assert r2.returncode == Exit.NO_GPU == 11
    _nothing_left(env)


def test_dry_run_native_prints_the_exact_command(env):
    r = _run(["make", "start-qwen-optimized", "RUNTIME=native"], env, DRY_RUN="1")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    launch = [ln for ln in r.stdout.splitlines() if " -m sglang.launch_server " in ln]
    assert len(launch) == 1
    cmd = launch[0]
    assert re.match(r"\S*python\S* -m sglang\.launch_server --model-path Qwen/Qwen2\.5-Coder-14B-Instruct-GPTQ-Int4 ", cmd)
    assert f" --host 127.0.0.1 --port {env['PORT']} " in cmd
    for flag in ("--kv-cache-dtype fp8_e5m2", "--mem-fraction-static 0.85", "--context-length 32768",
                 "--enable-hierarchical-cache --hicache-size 8"):
        assert f" {flag} " in f"{cmd} ", flag
    assert "DRY RUN: nothing started" in r.stdout
    assert "would stop at: gpu" in r.stdout           # it says what a real start would refuse
    _nothing_left(env)


def test_down_with_nothing_running(env):
    r = _run([str(PY), "-m", "vramkit", "down", "--name", "vramkit-x"], env)
    assert r.returncode == 0
    assert r.stdout.strip() == "vramkit: vramkit-x is not running (nothing recorded); nothing to stop"
    assert r.stderr == ""
    _nothing_left(env)
